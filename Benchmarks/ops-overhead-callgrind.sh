#!/usr/bin/env bash
# Instructions per request of `bigpeer serve` with the access log off, text and JSON, counted by
# callgrind: repeatable on a loaded machine, where wall-clock CPU per request is not
# (docs/PERFORMANCE.md, "Metrics and access log"). Not wall-clock: the kernel's part (socket
# writes, the log writer's write(2)) is not counted, and a large memcpy counts one per byte.
#
#   Benchmarks/ops-overhead-callgrind.sh            # builds release; N=2000 requests per test
#   BIGPEER_BIN=/path/to/bigpeer CONFIGS="off json" Benchmarks/ops-overhead-callgrind.sh
#
# Per configuration: start the server under callgrind (--threads 2, --insecure-dev, a private
# PostgreSQL in a scratch directory), warm up with 300 requests, zero the counters, send N
# requests on one keep-alive connection (GET /healthz, then the point read), dump, divide.
# Needs valgrind, python3, curl and a C compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2000}
PORT=${PORT:-18190}
CONFIGS=${CONFIGS:-"off text json"}
WORK=$(mktemp -d /tmp/bigpeer-callgrind.XXXXXX)
chmod 755 "$WORK"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
command -v valgrind >/dev/null || { echo "valgrind missing: apt-get install valgrind" >&2; exit 1; }
BIN=${BIGPEER_BIN:-}
if [ -z "$BIN" ]; then swift build -c release --product bigpeer >/dev/null; BIN="$(swift build -c release --show-bin-path)/bigpeer"; fi
# Valgrind 3.19 cannot read the DWARF 5 the Swift toolchain writes: keep the symbols, drop the rest.
strip --strip-debug -o "$WORK/bigpeer" "$BIN"
# Valgrind 3.19 writes into sigsuspend's mask, and libdispatch's main thread passes a read-only
# one (a crash in valgrind at start): hand it a copy.
cat > "$WORK/sigsuspend.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <unistd.h>
#include <sys/syscall.h>
int sigsuspend(const sigset_t *mask) { sigset_t copy = *mask; return syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8); }
C
cc -shared -fPIC -O2 "$WORK/sigsuspend.c" -o "$WORK/sigsuspend.so"

cat > "$WORK/client.py" <<'PY'
import http.client, json, sys
port, kind, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
body = json.dumps({"statement": "SELECT * FROM bench WHERE _id = :id", "args": {"id": "doc-1"}})
for _ in range(n):
    if kind == "healthz":
        c.request("GET", "/healthz")
    else:
        c.request("POST", "/api/v4/store/execute", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    if r.status != 200: sys.exit(f"{kind}: status {r.status}")
PY

echo "## $(date -u +%FT%TZ) $(git rev-parse --short HEAD) N=$N (callgrind instructions per request, not wall-clock)"
echo
echo "| config | GET /healthz | point read |"
echo "|---|---:|---:|"
for config in $CONFIGS; do
    case "$config" in
    off) args=(--access-log off) ;;
    text) args=(--access-log on --log-format text) ;;
    json) args=(--access-log on --log-format json) ;;
    *) echo "unknown config $config" >&2; exit 1 ;;
    esac
    LD_PRELOAD="$WORK/sigsuspend.so" valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$config.out" \
        "$WORK/bigpeer" serve --port "$PORT" --threads 2 --insecure-dev --data-dir "$WORK/data" "${args[@]}" >"$WORK/$config.log" 2>&1 & PID=$!
    for _ in $(seq 1200); do kill -0 "$PID" 2>/dev/null || { cat "$WORK/$config.log" >&2; exit 1; }; curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.25; done
    curl -sf -H 'Content-Type: application/json' -d '{"statement":"INSERT INTO bench DOCUMENTS ({_id: '"'doc-1'"', n: 1}) ON ID CONFLICT DO NOTHING"}' \
        "http://127.0.0.1:$PORT/api/v4/store/execute" >/dev/null
    row="| $config"
    for kind in healthz read; do
        python3 "$WORK/client.py" "$PORT" "$kind" 300
        sleep 0.5
        callgrind_control -z "$PID" >/dev/null 2>&1
        python3 "$WORK/client.py" "$PORT" "$kind" "$N"
        callgrind_control -d "$kind" "$PID" >/dev/null 2>&1
        sleep 0.5
        dump=$(ls -t "$WORK/cg.$config.out".* | head -1)
        total=$(awk '/^totals:/ {print $2; exit}' "$dump")
        row+=" | $((total / N))"
    done
    echo "$row |"
    kill "$PID"; wait "$PID" 2>/dev/null || true
    rm -f "$WORK/cg.$config.out"*
done
