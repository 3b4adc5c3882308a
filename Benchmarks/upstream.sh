#!/usr/bin/env bash
# Local node measurements (docs/PERFORMANCE.md, "Local node"; issue #18), with their references in
# the same run:
#   Benchmarks/upstream.sh [changes=100000] [writes=1000]
# - catch-up: a node that was cut off while N ~1 KB documents were written on it, then reconnected:
#   time until the cloud has acknowledged all of them, vs COPY of the same rows from the node's
#   database into a table of the cloud's (goal: ≥ 50 % of COPY's speed);
# - latency from a REST write on node A to a sync peer of node C, through the cloud (A → cloud → C),
#   p50/p99 over W writes (goal p99 < 100 ms on loopback), next to the same measure on the cloud
#   alone (write and peer on the cloud: one hop);
# - bytes of the upload for a one-field update of a 250 KB document made on the node (goal < 200 B),
#   next to the size a sync peer of the cloud receives for the same kind of update;
# - node A's peak RSS during the catch-up (a fresh process: bounded batches, not the backlog).
# Environment: BIGPEER_BIN=path (use this binary, skip the build).
# Starts three `bigpeer serve` (release), each with its own data dir and private PostgreSQL, all
# with --insecure-dev (loopback only). They, their PostgreSQLs and the peers share the machine's
# cores: say so when quoting the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
changes=${1:-100000}; writes=${2:-1000}
export PATH="/opt/swift/usr/bin:$PATH"
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build -c release --product bigpeer >/dev/null
  bin=.build/release/bigpeer
fi
work=$(mktemp -d /tmp/bigpeer-upstream-XXXX); chmod 711 "$work"
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pc=$(freeport); pa=$(freeport); pn=$(freeport)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
serve() {  # name port [args...]
  local name=$1 port=$2; shift 2
  "$bin" serve --port "$port" --data-dir "$work/$name" --insecure-dev --max-body-bytes $((256<<20)) --log-level warning "$@" >>"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && return; sleep 0.1; done
  echo "$name did not start: $(tail -5 "$work/$name.log")"; exit 1
}
up="ws://127.0.0.1:$pc/api/v4/sync"
serve cloud "$pc"; cloud_pid=${pids[-1]}
serve a "$pa" --upstream "$up" --upstream-subscribe "SELECT * FROM fanout" --upstream-retry-max 1; a_pid=${pids[-1]}
serve c "$pn" --upstream "$up" --upstream-subscribe "SELECT * FROM fanout" --upstream-retry-max 1
psql_() { local d="$work/$1"; shift; psql -q -h "$d/postgres" -p "$(cat "$d/postgres-port")" -U bigpeer bigpeer "$@"; }
status() { curl -sf "127.0.0.1:$pa/api/v4/upstream" -H 'Authorization: Bearer x'; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$1"; }
exec_() { curl -sf "127.0.0.1:$1/api/v4/store/execute" -H 'Authorization: Bearer x' -H 'Content-Type: application/json' --data-binary "$2" -o /dev/null; }
# Polled every 100 ms with curl and grep only (python per poll cost the shared cores ~10 %).
wait_uploaded() {
  for _ in $(seq 1 6000); do status | grep -q '"pendingUploads":{"changes":0,' && return; sleep 0.1; done
  echo "uploads did not finish"; exit 1
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== latency: REST write on node A -> sync peer on node C, through the cloud ($writes writes)"
"$bin" bench sync fanout --url "ws://127.0.0.1:$pn" --key x --peers 1 --writes "$writes" --interval-ms 20 --write-url "http://127.0.0.1:$pa" --collection fanout
echo "== reference: REST write on the cloud -> sync peer on the cloud (one hop)"
"$bin" bench sync fanout --url "ws://127.0.0.1:$pc" --key x --peers 1 --writes "$writes" --interval-ms 20 --collection fanout1

echo "== bytes uploaded for a one-field update of a 250 KB document made on node A"
python3 - "$work" <<'PY'
import json, sys
fields = {f"f{i}": "x" * 240 for i in range(1000)}
fields["_id"] = "big"
json.dump({"statement": "INSERT INTO big DOCUMENTS (:d)", "args": {"d": fields}}, open(sys.argv[1] + "/big.json", "w"))
PY
exec_ "$pa" @"$work/big.json"
wait_uploaded
before=$(status | field "['uploadedBytes']")
exec_ "$pa" '{"statement": "UPDATE big SET f7 = '"'"'changed'"'"' WHERE _id = '"'"'big'"'"'"}'
wait_uploaded
after=$(status | field "['uploadedBytes']")
echo "upload of the one-field update: $((after - before)) bytes (the whole up message, CBOR, without WebSocket framing)"
echo "== reference: the same update as a sync peer of the cloud receives it"
"$bin" bench sync update-size --url "ws://127.0.0.1:$pc" --key x --kilobytes 250

echo "== catch-up: $changes documents (~1 KB) written on node A while the cloud is down"
kill -TERM "$cloud_pid"; wait "$cloud_pid" 2>/dev/null || true
python3 - "$work" "$changes" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
pad = "x" * 900
for b in range(0, n, 5000):
    ids = range(b, min(n, b + 5000))
    args = {f"d{i}": {"_id": f"d{i:07d}", "n": i, "pad": pad} for i in ids}
    statement = "INSERT INTO catchup DOCUMENTS " + ", ".join(f"(:d{i})" for i in ids)
    json.dump({"statement": statement, "args": args}, open(f"{work}/seed-{b // 5000:04d}.json", "w"))
PY
for f in "$work"/seed-*.json; do exec_ "$pa" @"$f" || { echo "seeding failed"; exit 1; }; done
# Node A again as a fresh process, so its peak memory is the upload's, not the seeding's.
kill -TERM "$a_pid"; wait "$a_pid" 2>/dev/null || true
serve a "$pa" --upstream "$up" --upstream-subscribe "SELECT * FROM fanout" --upstream-retry-max 1; a_pid=${pids[-1]}
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
echo "waiting to go up: $(status | field "['pendingUploads']['changes']") changes; node A RSS $(kb "$a_pid" VmRSS) KiB"
serve cloud "$pc"
start=$(date +%s.%N)
wait_uploaded
catchup=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
echo "catch-up: $changes documents acknowledged by the cloud in $catchup s (from the cloud's start, reconnection backoff included)"
echo "node A memory: peak RSS $(kb "$a_pid" VmHWM) KiB over the whole upload (the documents' states: $(psql_ a -At -c "SELECT pg_size_pretty(sum(octet_length(state))) FROM documents WHERE collection = 'catchup'"))"
psql_ cloud -c "CREATE TABLE copy_reference (LIKE documents INCLUDING ALL)"
start=$(date +%s.%N)
psql_ a -c "\\copy (SELECT collection, id, value, state, deleted, deleted_at, updated_at FROM documents WHERE collection = 'catchup') TO STDOUT" \
  | psql_ cloud -c "\\copy copy_reference (collection, id, value, state, deleted, deleted_at, updated_at) FROM STDIN"
copy=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
echo "reference: COPY of the same rows from node A's database into a table of the cloud's: $copy s"
python3 -c "print(f'catch-up speed: {100 * $copy / $catchup:.0f} % of COPY (goal >= 50 %)')"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
