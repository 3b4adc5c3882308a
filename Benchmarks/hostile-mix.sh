#!/usr/bin/env bash
# A normal client's p99 on an idle server and while a bounded hostile mix runs (regex bombs with a
# constant and with a per-document condition, LIKE bombs, slow readers of a huge result, a WebSocket
# session flood): docs/PERFORMANCE.md, "Hostile mix"; the goal (BENCHMARKS.md of the design notes) is hostile p99 ≤ 2× idle p99.
#   Benchmarks/hostile-mix.sh [seconds-per-phase=20]
# Environment: BIGPEER_BIN=path (skip the release build), FLOOD=n (WebSocket upgrades held, default 300),
# HOSTILE=kinds (regex,regexdoc,like,slow,flood), RATE_regex / RATE_regexdoc / RATE_like=n (each client of that
# bomb kind paced to n requests a second in the hostile phase; default: as fast as answered),
# ATTACKER_CPUS=list (the hostile clients and the control's sink only on these CPUs, the normal client on the
# others: an attacker on another machine), NORMAL_RT=n (the normal client SCHED_FIFO at priority n: a client
# whose own process never waits for a CPU here, so what is measured is the server's answer),
# ATTACKER_KEY=own (the hostile clients on a key of their own), ATTACKER_TIME_LIMIT=RATE:BURST (that key created with
# `keys create --time-limit`: a share of the server's time of its own; implies ATTACKER_KEY=own), SERVE_EXTRA="flags" (added to `bigpeer serve`, e.g. --no-loop-yield for a comparison),
# TRACE=path (the normal client's per-request latencies to path, the server's log at info level,
# with its access log, to path.server.log: Benchmarks/hostile_trace.py joins the two).
# Starts `bigpeer serve` (release) on its own data dir and a free loopback port; everything stops
# by itself after three phases (idle, hostile, idle again).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
secs=${1:-20}
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build -c release --product bigpeer >/dev/null
  bin=.build/release/bigpeer
fi
work=$(mktemp -d /tmp/bigpeer-hostile-XXXX); chmod 711 "$work"
level=notice; [ -z "${TRACE:-}" ] || level=info
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$bin" serve --port "$port" --data-dir "$work/data" --max-body-bytes $((64<<20)) --log-level "$level" ${SERVE_EXTRA:-} >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; [ -z "${TRACE:-}" ] || cp "$work/server.log" "$TRACE.server.log"; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
key=$("$bin" keys create --data-dir "$work/data" --description hostile --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
# ATTACKER_KEY=own: the hostile clients use a key of their own (per-credential limits and turns can
# then tell them from the normal client), else the normal client's.
attacker_key=
if [ "${ATTACKER_KEY:-}" = own ] || [ -n "${ATTACKER_TIME_LIMIT:-}" ]; then
  attacker_key=$("$bin" keys create --data-dir "$work/data" --description hostile-attacker --expires-in 1d --read-all --write-all \
    ${ATTACKER_TIME_LIMIT:+--time-limit "$ATTACKER_TIME_LIMIT"} 2>/dev/null | tail -1)
fi
echo "==> machine: $(nproc) cores, $(free -h | awk '/Mem:/ {print $2}'); server pid $pid; $secs s per phase"
python3 Benchmarks/hostile_mix.py "http://127.0.0.1:$port" "$key" "$secs" $attacker_key
echo "==> server peak RSS: $(awk '/VmHWM/ {print $2, $3}' /proc/$pid/status)"
