#!/usr/bin/env bash
# The cost of the abuse limits and the audit log on a cached point read, same binary, same run:
# three `bigpeer serve` instances on one private cluster, alternated round by round (wrk against
# POST /api/v4/store/execute, `SELECT * FROM bench WHERE _id = :id`, read cache warm):
#   off      --auth-failure-limit off --audit-log off  (no guard: the code path before the limits)
#   default  the defaults: failed-authentication throttle, audit of denials
#   limits   --rate-limit-address and --rate-limit-credential on (never reached), audit of denials
#   all      the same limits and --audit-log all (one audit line per request, to the server's
#            stderr file)
#   Benchmarks/abuse-ab.sh [seconds=10] [rounds=3]
# Environment: BIGPEER_BIN=path (skip the build), CONNECTIONS=n (default 8), DOCS=n (default 1000).
# Reports requests/s and server CPU µs per request (utime + stime from /proc/PID/stat).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/lib/rest-workload.sh
secs=${1:-10}; rounds=${2:-3}; conns=${CONNECTIONS:-8}; ndocs=${DOCS:-1000}
export PATH="/opt/swift/usr/bin:$PATH"
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build -c release --product bigpeer >/dev/null
  bin=.build/release/bigpeer
fi
work=$(mktemp -d /tmp/bigpeer-abuse-XXXX); chmod 711 "$work"
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
names=(off default limits all)
declare -A flags=(
  [off]="--auth-failure-limit off --audit-log off"
  [default]=""
  [limits]="--rate-limit-address 1000000:1000000 --rate-limit-credential 1000000:1000000"
  [all]="--rate-limit-address 1000000:1000000 --rate-limit-credential 1000000:1000000 --audit-log all")
declare -A port pid
cleanup() { for n in "${names[@]}"; do kill -TERM "${pid[$n]:-0}" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
for n in "${names[@]}"; do
  port[$n]=$(freeport)
  # shellcheck disable=SC2086
  "$bin" serve --port "${port[$n]}" --data-dir "$work/data" --threads 1 --log-level notice ${flags[$n]} >"$work/$n.log" 2>&1 &
  pid[$n]=$!
  for _ in $(seq 1 300); do curl -sf "127.0.0.1:${port[$n]}/readyz" >/dev/null && break; sleep 0.1; done
done
key=$("$bin" keys create --data-dir "$work/data" --description bench --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
rest_bulk_json "$work/bulk.json" "$ndocs"
curl -sf "127.0.0.1:${port[off]}/api/v4/store/execute" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' --data-binary @"$work/bulk.json" -o /dev/null
rest_lua_scripts "$work" "$key" "$ndocs"
for n in "${names[@]}"; do wrk -t1 -c"$conns" -d2s -s "$work/read.lua" "http://127.0.0.1:${port[$n]}/api/v4/store/execute" >/dev/null; done
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tck=$(getconf CLK_TCK)
printf "%-8s %5s %10s %12s %9s\n" config round "req/s" "cpu µs/req" "non-2xx"
for r in $(seq 1 "$rounds"); do
  for n in "${names[@]}"; do
    c0=$(cpu_of "${pid[$n]}")
    out=$(wrk -t"$(( conns < 2 ? conns : 2 ))" -c"$conns" -d"${secs}s" -s "$work/read.lua" "http://127.0.0.1:${port[$n]}/api/v4/store/execute")
    c1=$(cpu_of "${pid[$n]}")
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    bad=$(echo "$out" | awk '/Non-2xx/ {print $5}'); bad=${bad:-0}
    printf "%-8s %5s %10s %12s %9s\n" "$n" "$r" "$rps" "$(python3 -c "print(round(($c1 - $c0) / $tck * 1e6 / $reqs, 1))")" "$bad"
  done
done
echo "audit lines written by 'all': $(grep -c 'bigpeer.audit' "$work/all.log")"
