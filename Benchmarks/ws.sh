#!/usr/bin/env bash
# WebSocket echo, side by side in one run: BigPeer (`bigpeer serve --insecure-dev --enable-echo`,
# release) vs Hummingbird 2 + hummingbird-websocket (Benchmarks/peers/HummingbirdWSEcho) vs the
# Python `websockets` server (Benchmarks/peers/python_ws_echo.py). All three run at once on their
# own ports; each row is measured on each server in turn (interleaved), so machine load drifts
# across servers as little as possible.
#
#   Benchmarks/ws.sh                 # SECS=5 ROUNDS=1 IDLE_CONNS=2000 [BIGPEER_BIN=path: skip its build]
#
# Client: Benchmarks/WSLoad (`ws-load`: our client adapter on one epoll loop, two for deflate), one
# message in flight per connection, every echo checked.
# Rows: 64 B text round trips/s on 1 and on 100 connections; 64 KiB binary (JSON-like, ~3:1
# compressible) echo throughput on 8 connections without and with permessage-deflate; server RSS
# per idle WebSocket (IDLE_CONNS opened, RSS before vs while held).
# Also printed: server CPU per round trip (utime+stime from /proc/PID/stat over the run), which
# ranks servers more stably than rates on a loaded shared machine. Each run is SECS long (≤ 10).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-5}
ROUNDS=${ROUNDS:-1}
IDLE_CONNS=${IDLE_CONNS:-2000}
ulimit -n 30000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
WORK=$(mktemp -d /tmp/bigpeer-ws-XXXX); chmod 711 "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; ls "$WORK"/run-*.out >/dev/null 2>&1 || rm -rf "$WORK"; }
trap cleanup EXIT

echo "building (release) ..." >&2
[ -n "${BIGPEER_BIN:-}" ] || swift build -c release --product bigpeer --scratch-path .build-ws-rel >/dev/null
(cd Benchmarks/WSLoad && swift build -c release --scratch-path .build-wsload >/dev/null)
(cd Benchmarks/peers/HummingbirdWSEcho && swift build -c release --scratch-path .build-hbws >/dev/null)
BIGPEER=${BIGPEER_BIN:-.build-ws-rel/release/bigpeer}
LOAD=Benchmarks/WSLoad/.build-wsload/release/ws-load
HB=Benchmarks/peers/HummingbirdWSEcho/.build-hbws/release/HummingbirdWSEcho
VENV=${WS_VENV:-/tmp/ws-venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import websockets' 2>/dev/null || "$VENV/bin/pip" install -q websockets

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

bp_port=$(free_port); "$BIGPEER" serve --insecure-dev --enable-echo --threads 2 --port "$bp_port" --data-dir "$WORK/bp" --log-level error >"$WORK/bp.log" 2>&1 & PIDS+=($!); bp_pid=$!
hb_port=$(free_port); "$HB" "$hb_port" >"$WORK/hb.log" 2>&1 & PIDS+=($!); hb_pid=$!
py_port=$(free_port); "$VENV/bin/python" Benchmarks/peers/python_ws_echo.py "$py_port" >"$WORK/py.log" 2>&1 & PIDS+=($!); py_pid=$!
wait_port "$bp_port"; wait_port "$hb_port"; wait_port "$py_port"
declare -A URL=([bigpeer]="ws://127.0.0.1:$bp_port/api/v4/_echo" [hummingbird]="ws://127.0.0.1:$hb_port/" [python]="ws://127.0.0.1:$py_port/")
declare -A PID=([bigpeer]=$bp_pid [hummingbird]=$hb_pid [python]=$py_pid)
SERVERS=(bigpeer hummingbird python)
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"

# Memory per idle WebSocket first, on servers that have only done a warm-up.
for s in "${SERVERS[@]}"; do
    "$LOAD" "${URL[$s]}" --connections 10 --seconds 1 >/dev/null  # warm-up: allocator, code paths
    sleep 0.5
    before=$(rss_kb "${PID[$s]}")
    "$LOAD" "${URL[$s]}" --idle --connections "$IDLE_CONNS" --hold 3 >"$WORK/idle.out" 2>&1 &
    lp=$!
    for _ in $(seq 1 200); do grep -q ready "$WORK/idle.out" 2>/dev/null && break; sleep 0.1; done
    sleep 1
    after=$(rss_kb "${PID[$s]}")
    wait $lp || true
    echo "idle $s: $IDLE_CONNS connections, RSS $before -> $after KiB = $(( (after - before) * 1024 / IDLE_CONNS )) B per connection"
done

run_row() {  # label, ws-load arguments...
    local label=$1; shift
    for s in "${SERVERS[@]}"; do
        local t0 t1 out rt rc=0
        t0=$(cpu_ticks "${PID[$s]}")
        "$LOAD" "${URL[$s]}" --seconds "$SECS" "$@" >"$WORK/run.out" 2>&1 || rc=$?
        t1=$(cpu_ticks "${PID[$s]}")
        out=$(tail -1 "$WORK/run.out")
        [ "$rc" -eq 0 ] || out="$out (ws-load exit $rc; output kept in $WORK/run-$s.out)"
        [ "$rc" -eq 0 ] || cp "$WORK/run.out" "$WORK/run-$s.out"
        rt=$(sed -nE 's/.*rt\/s=([0-9]+).*/\1/p' <<<"$out")
        local cpu="?"
        if [ -n "$rt" ] && [ "$rt" -gt 0 ]; then
            cpu=$(python3 -c "print(round(($t1 - $t0) * 1e6 / 100 / ($rt * ($SECS + 0.5)), 1))")  # + the 0.5 s warm-up
        fi
        echo "$label $s: $out server-cpu-us/rt=$cpu load=$(cut -d' ' -f1 /proc/loadavg)"
    done
}

for r in $(seq "$ROUNDS"); do
    echo "--- round $r"
    run_row "64B x1" --connections 1 --size 64
    run_row "64B x100" --connections 100 --size 64
    run_row "64KiB x8" --connections 8 --size 65536 --binary
    run_row "64KiB x8 deflate" --connections 8 --size 65536 --binary --deflate --threads 2  # zlib: the client does as much work as the server
done
echo "machine: load average $(cut -d' ' -f1-3 /proc/loadavg) at end"
