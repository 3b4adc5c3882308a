#!/usr/bin/env bash
# HTTP server benchmark: BigPeer (Benchmarks/HTTPBench) vs nginx fixed 200 (1 and 2 workers)
# and, when built, Hummingbird 2 (Benchmarks/peers/HummingbirdHello), interleaved in one run.
#
#   Benchmarks/http.sh                 # ROUNDS=1 DURATION=10s
#   ROUNDS=2 DURATION=10s Benchmarks/http.sh
#
# Per server and round: wrk -t2 -c64 and -c256 on GET /healthz, wrk -t2 -c64 on POST /echo
# (small JSON), each DURATION long with --latency; server CPU per request from /proc/PID/stat.
# Then server RSS per idle keep-alive connection with IDLE_CONNS (10,000) idle connections.
# Needs wrk and nginx (apt-get install wrk nginx-light) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
DURATION=${DURATION:-10s}
IDLE_CONNS=${IDLE_CONNS:-10000}
PORT=${PORT:-18080}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
ulimit -n 30000 2>/dev/null || ulimit -n "$(ulimit -Hn)"

command -v wrk >/dev/null || { echo "wrk missing: apt-get install wrk" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx missing: apt-get install nginx-light" >&2; exit 1; }
(cd Benchmarks/HTTPBench && swift build -c release >/dev/null)
BIGPEER=Benchmarks/HTTPBench/.build/release/HTTPBench
HB=Benchmarks/peers/HummingbirdHello/.build/release/HummingbirdHello

cat > "$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"statement":"SELECT * FROM cars WHERE color = :c","args":{"c":"blue"}}'
wrk.headers["Content-Type"] = "application/json"
LUA

start_server() {  # name -> sets PID
    case "$1" in
    bigpeer) "$BIGPEER" "$PORT" 2 reuseport >/dev/null 2>&1 & PID=$! ;;
    bigpeer-acceptor) "$BIGPEER" "$PORT" 2 acceptor >/dev/null 2>&1 & PID=$! ;;
    bigpeer-noyield) "$BIGPEER" "$PORT" 2 reuseport noyield >/dev/null 2>&1 & PID=$! ;;
    nginx-1|nginx-2)
        sed "s/WORKERS/${1#nginx-}/; s/PORT/$PORT/; s#PIDFILE#$WORK/nginx.pid#" Benchmarks/nginx/nginx.conf.template > "$WORK/nginx.conf"
        nginx -c "$WORK/nginx.conf" -p "$WORK" & PID=$! ;;
    hummingbird) "$HB" "$PORT" >/dev/null 2>&1 & PID=$! ;;
    esac
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && return; sleep 0.05; done
    echo "server $1 did not start" >&2; exit 1
}

stop_server() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; sleep 0.3; }

# Sum of utime+stime (clock ticks) of a process and its children threads/workers.
cpu_ticks() {
    local total=0
    for p in $1 $(pgrep -P "$1" || true); do
        read -r -a f < "/proc/$p/stat" || continue
        total=$((total + f[13] + f[14]))
    done
    echo $total
}

run_wrk() {  # label args... -> prints "label rps p50 p99 cpu_us_per_req"
    local label=$1; shift
    local before after out rps reqs
    before=$(cpu_ticks "$PID")
    out=$(wrk -t2 -d"$DURATION" --latency "$@")
    after=$(cpu_ticks "$PID")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    local p50 p99 errs
    p50=$(awk '$1=="50%" {print $2}' <<<"$out")
    p99=$(awk '$1=="99%" {print $2}' <<<"$out")
    errs=$(awk '/Non-2xx|Socket errors/ {printf "%s ", $0}' <<<"$out")
    local tick; tick=$(getconf CLK_TCK)
    local cpu_us; cpu_us=$(awk -v a="$after" -v b="$before" -v n="$reqs" -v t="$tick" 'BEGIN { if (n > 0) printf "%.1f", (a-b)*1e6/t/n; else print "-" }')
    printf "| %-18s | %-22s | %10s | %8s | %8s | %8s | %s\n" "$SERVER" "$label" "$rps" "$p50" "$p99" "$cpu_us" "${errs:-}"
}

SERVERS="bigpeer bigpeer-noyield bigpeer-acceptor nginx-1 nginx-2"
[ -x "$HB" ] && SERVERS="$SERVERS hummingbird"
SERVERS="${SERVERS_OVERRIDE:-$SERVERS}"

echo "## $(date -u +%FT%TZ) nproc=$(nproc) rounds=$ROUNDS duration=$DURATION load:$(cut -d" " -f1-3 /proc/loadavg)"
echo
echo "| server             | test                   |      req/s |      p50 |      p99 | CPU µs/req | errors"
echo "|---|---|---:|---:|---:|---:|---|"
for round in $(seq "$ROUNDS"); do
    for SERVER in $SERVERS; do
        start_server "$SERVER"
        wrk -t2 -c64 -d2s "http://127.0.0.1:$PORT/healthz" >/dev/null  # warm-up
        run_wrk "GET /healthz c64" -c64 "http://127.0.0.1:$PORT/healthz"
        run_wrk "GET /healthz c256" -c256 "http://127.0.0.1:$PORT/healthz"
        if [ "$SERVER" != "${SERVER#nginx}" ]; then
            run_wrk "POST /echo c64 (fixed)" -c64 -s "$WORK/post.lua" "http://127.0.0.1:$PORT/echo"
        else
            run_wrk "POST /echo c64" -c64 -s "$WORK/post.lua" "http://127.0.0.1:$PORT/echo"
        fi
        stop_server
    done
done

echo
echo "### Memory per idle keep-alive connection ($IDLE_CONNS connections)"
for SERVER in bigpeer nginx-2; do
    start_server "$SERVER"
    rss() { local t=0; for p in $PID $(pgrep -P "$PID" || true); do t=$((t + $(awk '/VmRSS/ {print $2}' "/proc/$p/status"))); done; echo $t; }
    before=$(rss)
    mkfifo "$WORK/hold"
    python3 Benchmarks/idle_connections.py "$PORT" "$IDLE_CONNS" < "$WORK/hold" > "$WORK/idle.out" &
    HOLDER=$!
    exec 7>"$WORK/hold"
    for _ in $(seq 600); do grep -q ready "$WORK/idle.out" 2>/dev/null && break; sleep 0.1; done
    sleep 1
    after=$(rss)
    echo "- $SERVER: RSS $before KiB -> $after KiB: $(( (after - before) * 1024 / IDLE_CONNS )) bytes per idle connection ($(cat "$WORK/idle.out"))"
    exec 7>&-
    wait "$HOLDER" 2>/dev/null || true
    rm -f "$WORK/hold"
    stop_server
done
