#!/usr/bin/env bash
# Checks the running server against openapi.yaml with schemathesis (PyPI, 4.x): no 5xx on any
# generated request, every response conforms to the spec, undeclared methods get 405 with Allow.
#
#   scripts/schemathesis.sh                  # CI: coverage + fuzzing phases, 20 examples, seed 1
#   scripts/schemathesis.sh --full           # all phases including stateful (docs/CONFORMANCE.md)
#   BIGPEER_BIN=path/to/bigpeer scripts/schemathesis.sh   # use an already built binary
#
# Starts `bigpeer serve` on a free port with a private PostgreSQL in a temporary data directory
# (or on DATABASE_URL when set), runs schemathesis, stops the server, exits non-zero on any failure.
# schemathesis is installed once into a venv cached under $BIGPEER_VENV (default /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"

phases="coverage,fuzzing"
examples=20
if [ "${1:-}" = "--full" ]; then phases="examples,coverage,fuzzing,stateful"; examples=${BIGPEER_SCHEMATHESIS_EXAMPLES:-50}; fi

venv="${BIGPEER_VENV:-/tmp/bigpeer-schemathesis-venv}"
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "version 4\."; then
  echo "==> installing schemathesis 4.x into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'schemathesis>=4,<5'
fi
echo "==> $("$venv/bin/schemathesis" --version)"

. scripts/lib/test-server.sh
# The run checks the API, not the failed-authentication throttle: schemathesis's auth checks send
# bad credentials from this one address, and throttled, every later request would be a 429.
export BIGPEER_AUTH_FAILURE_LIMIT=off
test_server_start schemathesis
# Every API endpoint needs a key: make one with full scopes through the CLI (same database).
key=$(test_server_key schemathesis --read-all --write-all)

echo "==> schemathesis: phases $phases, $examples examples, seed 1"
status=0
repo=$(pwd)
# Run from the scratch directory: schemathesis keeps state in ./.schemathesis.
(cd "$work" && "$venv/bin/schemathesis" --config-file "$repo/scripts/schemathesis.toml" run "$repo/openapi.yaml" \
  --url "http://127.0.0.1:$port" \
  -H "Authorization: Bearer $key" \
  --checks all \
  --phases "$phases" \
  -n "$examples" \
  --seed 1 \
  --request-timeout 30 \
  --no-color) || status=$?

if grep -q "handler failed\|internal error" "$work/server.log"; then
  echo "==> server logged internal errors:"
  grep "handler failed\|internal error" "$work/server.log" | head -20
  status=1
fi
[ "$status" -eq 0 ] && echo "==> schemathesis: clean" || echo "==> schemathesis: FAILED (exit $status)"
exit "$status"
