#!/usr/bin/env bash
# What the access log, JSON logs and the metrics endpoint cost `bigpeer serve`: GET /healthz and a
# point read (POST /api/v4/store/execute, SELECT by _id) with wrk -t2 -c64, per configuration,
# interleaved in one run (docs/PERFORMANCE.md, "Metrics and access log").
#
#   Benchmarks/ops-overhead.sh                       # ROUNDS=2 DURATION=6s, builds release
#   BEFORE=/path/to/older/bigpeer Benchmarks/ops-overhead.sh   # adds that binary at its default
#                                                    # log level and at --log-level notice
# Each server runs with --threads 2 and --insecure-dev on a private PostgreSQL in a scratch
# directory; with a Prometheus-style scrape of /metrics every second where --metrics-port is on.
# Server CPU per request from /proc/PID/stat. Needs wrk (apt-get install wrk) and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-6s}
PORT=${PORT:-18090}
MPORT=$((PORT + 1))
WORK=$(mktemp -d /tmp/bigpeer-ops-bench.XXXXXX)
chmod 755 "$WORK"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
command -v wrk >/dev/null || { echo "wrk missing: apt-get install wrk" >&2; exit 1; }
BIN=${BIGPEER_BIN:-}
if [ -z "$BIN" ]; then swift build -c release --product bigpeer >/dev/null; BIN="$(swift build -c release --show-bin-path)/bigpeer"; fi

cat > "$WORK/read.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"statement":"SELECT * FROM bench WHERE _id = :id","args":{"id":"doc-1"}}'
wrk.headers["Content-Type"] = "application/json"
LUA

CONFIGS="off text json metrics"
[ -n "${BEFORE:-}" ] && CONFIGS="before-info before-notice $CONFIGS"

start_server() {  # config -> sets PID, SCRAPER
    local bin=$BIN args=(--access-log off)
    case "$1" in
    before-info) bin=$BEFORE; args=() ;;
    before-notice) bin=$BEFORE; args=(--log-level notice) ;;
    off) ;;
    text) args=(--access-log on --log-format text) ;;
    json) args=(--access-log on --log-format json) ;;
    metrics) args=(--access-log off --metrics-port "$MPORT") ;;
    esac
    "$bin" serve --port "$PORT" --threads 2 --insecure-dev --data-dir "$WORK/data-$1" "${args[@]}" >"$WORK/$1.log" 2>&1 & PID=$!
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
    curl -sf -H 'Content-Type: application/json' -d '{"statement":"INSERT INTO bench DOCUMENTS ({_id: '"'doc-1'"', n: 1}) ON ID CONFLICT DO NOTHING"}' \
        "http://127.0.0.1:$PORT/api/v4/store/execute" >/dev/null
    SCRAPER=""
    if [ "$1" = metrics ]; then
        (while curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null; do sleep 1; done) & SCRAPER=$!
    fi
}

stop_server() {
    [ -n "$SCRAPER" ] && kill "$SCRAPER" 2>/dev/null || true
    kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true
}

cpu_ticks() { local f; read -r -a f < "/proc/$1/stat"; echo $((f[13] + f[14])); }

run_wrk() {  # label args...
    local label=$1; shift
    local before after out rps reqs cpu_us tick
    before=$(cpu_ticks "$PID")
    out=$(wrk -t2 -c64 -d"$DURATION" --latency "$@")
    after=$(cpu_ticks "$PID")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    tick=$(getconf CLK_TCK)
    cpu_us=$(awk -v a="$after" -v b="$before" -v n="$reqs" -v t="$tick" 'BEGIN { if (n > 0) printf "%.1f", (a-b)*1e6/t/n; else print "-" }')
    printf "| %-14s | %-12s | %10s | %8s | %8s | %s\n" "$CONFIG" "$label" "$rps" "$(awk '$1=="99%" {print $2}' <<<"$out")" "$cpu_us" \
        "$(awk '/Non-2xx|Socket errors/ {printf "%s ", $0}' <<<"$out")"
}

echo "## $(date -u +%FT%TZ) nproc=$(nproc) rounds=$ROUNDS duration=$DURATION load:$(cut -d" " -f1-3 /proc/loadavg)"
echo
echo "| config         | test         |      req/s |      p99 | CPU µs/req | errors"
echo "|---|---|---:|---:|---:|---|"
for round in $(seq "$ROUNDS"); do
    for CONFIG in $CONFIGS; do
        start_server "$CONFIG"
        wrk -t2 -c64 -d2s "http://127.0.0.1:$PORT/healthz" >/dev/null  # warm-up
        run_wrk "GET /healthz" "http://127.0.0.1:$PORT/healthz"
        run_wrk "point read" -s "$WORK/read.lua" "http://127.0.0.1:$PORT/api/v4/store/execute"
        stop_server
    done
done
