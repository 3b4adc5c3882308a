#!/usr/bin/env bash
# Sync measurements (docs/PERFORMANCE.md, "Sync"), with their references in the same run:
#   Benchmarks/sync.sh [docs=100000] [fanout-peers=1000] [idle-peers=1000]
# - initial sync of N ~1 KB documents to a fresh peer vs reading the same rows (id, state) out of
#   PostgreSQL with COPY ... TO STDOUT (the physical limit on this machine; goal ≥ 50 % of it),
#   over WebSocket and over a LAN TCP peer link (`serve --lan`; goal: LAN ≥ WebSocket);
# - fan-out latency p50/p99 from a REST write to P subscribed peers (goal: p99 < 50 ms on loopback);
# - bytes on the wire for a one-field update of a 250 KB document (goal < 200 bytes);
# - server memory per idle connected peer with one subscription (goal < 64 KB).
# Environment: BIGPEER_BIN=path (use this binary, skip the build); INITIAL_ONLY=1 (only the
# initial-sync rounds: no idle, update-size or fan-out phases); ROUNDS=n (initial-sync rounds, 2);
# SERVER_PREFIX="perf record -e cpu-clock -g -o FILE" (profile the server).
# Starts `bigpeer serve` (release) on its own data dir and private PostgreSQL. The peers, the
# server and PostgreSQL share the machine's cores: say so when quoting the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
docs=${1:-100000}; fanout=${2:-1000}; idle=${3:-1000}
export PATH="/opt/swift/usr/bin:$PATH"
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build -c release --product bigpeer >/dev/null
  bin=.build/release/bigpeer
fi
work=$(mktemp -d /tmp/bigpeer-sync-XXXX); chmod 711 "$work"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
lanport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
ulimit -n 65536 2>/dev/null || true
${SERVER_PREFIX:-} "$bin" serve --port "$port" --lan --lan-host 127.0.0.1 --lan-port "$lanport" --no-lan-advertise --data-dir "$work/data" --db-connections 32 --max-body-bytes $((256<<20)) --log-level warning >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
key=$("$bin" keys create --data-dir "$work/data" --description bench --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
cluster="$work/data/postgres"; pgport=$(cat "$work/data/postgres-port")
psql_() { psql -q -h "$cluster" -p "$pgport" -U bigpeer bigpeer "$@"; }
# utime + stime of the server process, in clock ticks.
server_cpu() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Idle peers first, on the fresh process: later phases leave freed heap the peers would reuse,
# which would hide their cost from RSS.
[ -n "${INITIAL_ONLY:-}" ] || "$bin" bench sync idle --url "ws://127.0.0.1:$port" --key "$key" --peers "$idle" --server-pid "$pid"

# Seed in bulk statements of 5,000 documents (~1 KB each).
python3 - "$work" "$docs" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
pad = "x" * 900
for b in range(0, n, 5000):
    ids = range(b, min(n, b + 5000))
    args = {f"d{i}": {"_id": f"d{i:07d}", "n": i, "pad": pad} for i in ids}
    statement = "INSERT INTO bench DOCUMENTS " + ", ".join(f"(:d{i})" for i in ids)
    json.dump({"statement": statement, "args": args}, open(f"{work}/seed-{b // 5000:04d}.json", "w"))
PY
for f in "$work"/seed-*.json; do
  curl -sf "127.0.0.1:$port/api/v4/store/execute" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' --data-binary @"$f" -o /dev/null \
    || { echo "seeding failed (see $work/server.log)"; exit 1; }
done
psql_ -c "VACUUM ANALYZE documents" >/dev/null
echo "seeded $docs documents; state bytes: $(psql_ -At -c "SELECT pg_size_pretty(sum(octet_length(state))) FROM documents WHERE collection = 'bench'")"

for round in $(seq 1 "${ROUNDS:-2}"); do
  start=$(date +%s.%N)
  psql_ -c "\\copy (SELECT id, state FROM documents WHERE collection = 'bench' ORDER BY id) TO '/dev/null'"
  copy=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
  echo "round $round: COPY (id, state) of $docs rows: ${copy}s = $(python3 -c "print(int($docs / $copy))") rows/s"
  for link in "ws://127.0.0.1:$port/api/v4/sync" "tcp://127.0.0.1:$lanport"; do
    cpu0=$(server_cpu)
    echo -n "round $round, ${link%%:*}: "
    "$bin" bench sync initial --url "ws://127.0.0.1:$port" --sync-url "$link" --key "$key" --collection bench
    echo "round $round, ${link%%:*}: server CPU over the sync $(python3 -c "print(round(($(server_cpu) - $cpu0) / $(getconf CLK_TCK), 2))") s; load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done

if [ -z "${INITIAL_ONLY:-}" ]; then
  "$bin" bench sync update-size --url "ws://127.0.0.1:$port" --key "$key" --kilobytes 250
  "$bin" bench sync fanout --url "ws://127.0.0.1:$port" --key "$key" --peers "$fanout" --writes 50
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
