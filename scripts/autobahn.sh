#!/usr/bin/env bash
# Runs the Autobahn WebSocket testsuite (fuzzingclient) against a real `bigpeer serve --enable-echo`.
#
#   scripts/autobahn.sh [quick|limits|deflate|full]      (default: quick)
#
# Starts the server on a free loopback port with a private PostgreSQL in a temporary data dir
# (`--insecure-dev`: no API keys; the echo endpoint is unauthenticated anyway), runs the testsuite's
# fuzzingclient against ws://127.0.0.1:PORT/api/v4/_echo, stops the server, and exits non-zero on
# any failed case (scripts/lib/autobahn_report.py).
#   quick   every case but 9.*, 12.*, 13.*     limits  9.* (sizes)
#   deflate 12.* and 13.* (slow: the testsuite compresses in Python)     full  everything (~20 min)
# The testsuite is Python 2 code: it runs in a virtualenv on a Python 2.7 (pyenv's 2.7.18, or
# python2.7 on PATH), built once with scripts/autobahn-requirements.txt.
# Environment: BIGPEER_BIN (default: the `swift build` debug binary), AB_VENV (the virtualenv,
# default /tmp/bigpeer-autobahn-venv), AB_OUT (reports, default .build/autobahn-reports),
# AB_TIMEOUT (seconds, default 2400).
set -euo pipefail
set_name="${1:-quick}"
root="$(cd "$(dirname "$0")/.." && pwd)"
case "$set_name" in
    quick)   cases='["*"]'; exclude='["9.*", "12.*", "13.*"]';;
    limits)  cases='["9.*"]'; exclude='[]';;
    deflate) cases='["12.*", "13.*"]'; exclude='[]';;
    full)    cases='["*"]'; exclude='[]';;
    *) echo "autobahn.sh: unknown set $set_name (quick, limits, deflate or full)" >&2; exit 2;;
esac

venv="${AB_VENV:-/tmp/bigpeer-autobahn-venv}"
if [[ ! -x "$venv/bin/wstest" ]]; then
    py2="/root/.pyenv/versions/2.7.18/bin/python2.7"
    [[ -x "$py2" ]] || py2="$(command -v python2.7 || true)"
    [[ -n "$py2" && -x "$py2" ]] || { echo "autobahn.sh: the testsuite needs Python 2.7 (pyenv 2.7.18 or python2.7 on PATH)" >&2; exit 2; }
    echo "==> building the Autobahn testsuite's virtualenv in $venv"
    python3 -m venv "$venv-tools"
    "$venv-tools/bin/pip" -q install 'virtualenv<20.22'   # the last virtualenv that makes Python 2 environments
    "$venv-tools/bin/virtualenv" -q -p "$py2" "$venv"
    "$venv/bin/pip" -q install -r "$root/scripts/autobahn-requirements.txt"
fi
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

url="ws://127.0.0.1:$port/api/v4/_echo"
out="${AB_OUT:-$root/.build/autobahn-reports}"
mkdir -p "$out"
rm -rf "${out:?}/$set_name"
cat >"$data/spec.json" <<JSON
{"outdir": "$out/$set_name", "servers": [{"agent": "bigpeer", "url": "$url"}],
 "cases": $cases, "exclude-cases": $exclude, "exclude-agent-cases": {}}
JSON
echo "==> autobahn $set_name against $url"
# wstest exits 0 whatever the cases did; the report decides.
timeout "${AB_TIMEOUT:-2400}" "$venv/bin/wstest" -m fuzzingclient -s "$data/spec.json" >"$out/$set_name.log" 2>&1 || true
[[ -f "$out/$set_name/index.json" ]] || { echo "autobahn.sh: no report (timed out or crashed; see $out/$set_name.log)" >&2; exit 1; }
python3 "$root/scripts/lib/autobahn_report.py" "$out/$set_name/index.json"
