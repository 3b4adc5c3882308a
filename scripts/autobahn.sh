#!/usr/bin/env bash
# Runs the Autobahn WebSocket testsuite (fuzzingclient) against a real `bigpeer serve --enable-echo`.
#
#   scripts/autobahn.sh [quick|limits|deflate|full]      (default: quick)
#
# Starts the server on a free loopback port with a private PostgreSQL in a temporary data dir
# (`--insecure-dev`: no API keys; the echo endpoint is unauthenticated anyway), runs
# ../shared/tools/autobahn (next to the repository clone, as in CI) against
# ws://127.0.0.1:PORT/api/v4/_echo, stops the server, and exits non-zero on any failed case.
# Environment: BIGPEER_BIN (default: the `swift build` debug binary), AUTOBAHN (the tool),
# AB_OUT (reports, default .build/autobahn-reports).
set -euo pipefail
set_name="${1:-quick}"
root="$(cd "$(dirname "$0")/.." && pwd)"
tool="${AUTOBAHN:-$root/../shared/tools/autobahn}"
[[ -x "$tool" ]] || { echo "autobahn.sh: no Autobahn runner at $tool (set AUTOBAHN)" >&2; exit 2; }
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"
bin="${BIGPEER_BIN:-}"
if [[ -z "$bin" ]]; then
    (cd "$root" && swift build --product bigpeer >/dev/null)
    bin="$root/.build/debug/bigpeer"
fi

data="$(mktemp -d /tmp/bigpeer-autobahn-data.XXXXXX)"
chmod 755 "$data"   # as root, the private PostgreSQL runs as the postgres user
log="$data/serve.log"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin" serve --enable-echo --insecure-dev --host 127.0.0.1 --port "$port" --data-dir "$data/db" >"$log" 2>&1 &
pid=$!
cleanup() {
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$data"
}
trap cleanup EXIT

for _ in $(seq 1 600); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then break; fi
    kill -0 "$pid" 2>/dev/null || { echo "autobahn.sh: bigpeer serve exited:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || { echo "autobahn.sh: server not ready:" >&2; cat "$log" >&2; exit 1; }

echo "==> autobahn $set_name against ws://127.0.0.1:$port/api/v4/_echo"
AB_OUT="${AB_OUT:-$root/.build/autobahn-reports}" "$tool" "ws://127.0.0.1:$port/api/v4/_echo" "$set_name"
