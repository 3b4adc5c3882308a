#!/usr/bin/env bash
# A rolling restart under load (issue #22, "Measure: drain"): two `bigpeer serve` instances on one
# database behind nginx (deploy/nginx/bigpeer.conf), a steady stream of REST writes and a sync peer,
# both through nginx; each instance in turn gets SIGTERM (it drains), exits, and starts again.
# Reports the failed requests (goal 0), and checks that every acknowledged write is stored and
# reached the sync peer.
#   Benchmarks/rolling-restart.sh [writes-per-second=50] [rounds=2]
# Environment: BIGPEER_BIN=path (skip the release build). Needs nginx (apt-get install nginx-light).
# Everything runs on loopback and stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
rate=${1:-50}
rounds=${2:-2}
command -v nginx >/dev/null || { echo "needs nginx (apt-get install nginx-light)"; exit 1; }
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build -c release --product bigpeer >/dev/null
  bin=.build/release/bigpeer
fi
work=$(mktemp -d /tmp/bigpeer-rolling-XXXX); chmod 711 "$work"
. scripts/lib/loopback.sh
ports=("$(free_port)" "$(free_port)")
pids=("" "")
nginx_pid=""
peer_pid=""
cleanup() {
  for p in "$peer_pid" "$nginx_pid" "${pids[@]}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  sleep 2
  if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

start_instance() {  # start_instance INDEX
  local i=$1
  "$bin" serve --host 127.0.0.1 --port "${ports[$i]}" --threads 2 --data-dir "$work/data" --log-level notice >>"$work/server$i.log" 2>&1 &
  pids[$i]=$!
  wait_ready "http://127.0.0.1:${ports[$i]}/readyz" "${pids[$i]}" && return 0
  echo "instance $i did not become ready"; tail -20 "$work/server$i.log"; exit 1
}

start_instance 0
start_instance 1
. scripts/lib/nginx-front.sh
nginx_front_start "$work" "${ports[0]}" "${ports[1]}"
key=$("$bin" keys create --data-dir "$work/data" --description rolling --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
mkfifo "$work/peer.in"
"$bin" peer --data "$work/peer" --url "ws://127.0.0.1:$nginx_port" --key "$key" --subscribe "SELECT * FROM rolling" \
  <"$work/peer.in" >"$work/peer.out" 2>"$work/peer.err" &
peer_pid=$!
exec 9>"$work/peer.in"
echo "==> machine: $(nproc) cores; instances on ${ports[*]}, nginx on $nginx_port; $rate writes/s, $rounds rounds of restarts"

python3 Benchmarks/rolling_restart.py "http://127.0.0.1:$nginx_port" "$key" "$rate" "$work/writes.json" &
writer=$!
sleep 5
for round in $(seq 1 "$rounds"); do
  for i in 0 1; do
    t0=$(date +%s.%N)
    kill -TERM "${pids[$i]}"
    wait "${pids[$i]}" || echo "    instance $i exited with status $?"
    t1=$(date +%s.%N)
    start_instance "$i"
    t2=$(date +%s.%N)
    printf '    round %d, instance %d: drained and stopped in %.2f s, ready again %.2f s later\n' "$round" "$i" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
    sleep 5
  done
done
kill -INT "$writer"
wait "$writer" || true
python3 - "$work/writes.json" "$work/peer.out" "http://127.0.0.1:$nginx_port" "$key" <<'EOF'
import json, re, sys, time, urllib.request
writes, peer_out, base, key = sys.argv[1:5]
w = json.load(open(writes))
acked = set(w["acknowledged"])
def stored():
    body = json.dumps({"statement": "SELECT _id FROM rolling"}).encode()
    req = urllib.request.Request(base + "/api/v4/store/execute", body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return {item["_id"] for item in json.load(urllib.request.urlopen(req, timeout=30))["items"]}
in_db = stored()
deadline = time.time() + 60
while True:
    seen = set(re.findall(r"rr-\d+", open(peer_out).read()))
    if acked <= seen or time.time() > deadline:
        break
    time.sleep(0.5)
print(f"==> requests {w['sent']}, failed {len(w['failed'])} ({', '.join(sorted(set(w['failed'])))[:300] or 'none'})")
print(f"==> acknowledged writes {len(acked)}; missing from the database {len(acked - in_db)}; missing at the sync peer {len(acked - seen)}")
print(f"==> write latency through nginx: p50 {w['p50_ms']:.1f} ms, p99 {w['p99_ms']:.1f} ms, max {w['max_ms']:.1f} ms")
sys.exit(0 if not (acked - in_db) and not (acked - seen) else 1)
EOF
