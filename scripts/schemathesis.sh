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

bin="${BIGPEER_BIN:-}"
if [ -z "$bin" ]; then
  echo "==> building bigpeer"
  swift build --product bigpeer
  bin="$(swift build --show-bin-path)/bigpeer"
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
work=$(mktemp -d /tmp/bigpeer-schemathesis.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"  # drains and stops its private PostgreSQL
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "==> starting bigpeer serve on 127.0.0.1:$port (log: $work/server.log)"
"$bin" serve --host 127.0.0.1 --port "$port" --threads 2 --data-dir "$work/data" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; echo "bigpeer serve exited"; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { tail -50 "$work/server.log"; echo "server not ready"; exit 1; }

# Every API endpoint needs a key: make one with full scopes through the CLI (same database).
key=$("$bin" keys create --data-dir "$work/data" --description schemathesis --expires-in 1d --read-all --write-all 2>"$work/keys.log" | tail -1)
[ -n "$key" ] || { cat "$work/keys.log"; echo "could not create an API key"; exit 1; }

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
