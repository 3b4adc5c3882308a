#!/usr/bin/env bash
# Tail latency at EQUAL load: BigPeer's HTTP server (Benchmarks/HTTPBench, 2 loops) vs Hummingbird 2
# (Benchmarks/peers/HummingbirdHello), GET /healthz on 64 keep-alive connections at fixed request
# rates, interleaved, with `hey -q` (per-connection pacing; apt-get install hey).
#
#   Benchmarks/http-fixed-rate.sh            # RATES="10000 20000 30000" SECS=10 ROUNDS=2
#
# Why: wrk drives each connection as fast as the server answers (closed loop), so at saturation a
# faster server runs more requests per scheduler time slice, and its p99 is set by how long the
# kernel deschedules a busy loop thread while wrk's threads run on the same 2 cores — not by the
# server's own latency. At a fixed rate both servers see the same load and the percentiles compare
# like with like. hey's client costs CPU too and shares the cores with the server.
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${RATES:-10000 20000 30000}
SECS=${SECS:-10}
ROUNDS=${ROUNDS:-2}
command -v hey >/dev/null || { echo "hey missing: apt-get install hey" >&2; exit 1; }
(cd Benchmarks/HTTPBench && swift build -c release >/dev/null)
BIGPEER=Benchmarks/HTTPBench/.build/release/HTTPBench
HB=Benchmarks/peers/HummingbirdHello/.build/release/HummingbirdHello
[ -x "$HB" ] || { echo "build $HB first (cd Benchmarks/peers/HummingbirdHello && swift build -c release)" >&2; exit 1; }
"$BIGPEER" 18191 2 reuseport >/dev/null 2>&1 & bp=$!
"$HB" 18192 >/dev/null 2>&1 & hb=$!
trap 'kill $bp $hb 2>/dev/null || true' EXIT
sleep 1
echo "| round | rate (req/s) | server | achieved | p50 | p90 | p99 | load |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
  for rate in $RATES; do
    for s in bigpeer:18191 hummingbird:18192; do
      out=$(hey -z "${SECS}s" -c 64 -q $(( rate / 64 )) "http://127.0.0.1:${s#*:}/healthz" 2>&1)
      get() { awk -v p="$1" '$1 == p && $2 == "in" {printf "%.2f ms", $3 * 1000}' <<<"$out"; }
      ach=$(awk '/Requests\/sec/ {printf "%d", $2}' <<<"$out")
      echo "| $r | $rate | ${s%%:*} | $ach | $(get 50%) | $(get 90%) | $(get 99%) | $(cut -d' ' -f1 /proc/loadavg) |"
    done
  done
done
