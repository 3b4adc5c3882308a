#!/usr/bin/env bash
# REST store throughput vs pgbench on the same cluster, same run, interleaved.
#   Benchmarks/rest.sh [seconds=10] [rounds=3]
# Environment: BIGPEER_BIN=path (use this binary, skip the build), BULK_DOCS=n (default 100000),
# CONCURRENCY="1 8 64", WRK_THREADS=n (wrk threads, default 2; never more than the clients), SERVER_PREFIX="perf record -g -o FILE" (profile the server),
# READ_CACHE_MB=n (the server's --read-cache-mb; 0 measures every read through PostgreSQL),
# READS=0 (skip the warm-up and the point-read rows: writes only),
# BULK_ONLY=1 (stop after the bulk-insert row, which then also reports the CPU seconds the server
# and PostgreSQL spent on the bulk call, from /proc/PID/stat, and its peak server RSS),
# PROFILE_BULK=FILE (perf record the server and its PostgreSQL processes during the bulk call only).
# Before the timed runs every document is read once, in order, through /execute — the reads are
# then measured warm, as pgbench -S is (its table was just written, so it sits in shared buffers).
# - point read by _id through POST /api/v4/store/execute (wrk, 1/8/64 connections) vs pgbench -S
#   (same concurrency, prepared);
# - single-document INSERT through /execute vs pgbench -N (same concurrency);
# - single-document UPDATE by a random seeded _id (`SET n = n + 1`) vs pgbench -N (same concurrency);
# Starts `bigpeer serve` (release) on its own data dir, seeds 100k documents, creates an API key.
# wrk, the server and PostgreSQL share the machine's cores: say so when quoting the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/lib/rest-workload.sh
secs=${1:-10}; rounds=${2:-3}
export PATH="/opt/swift/usr/bin:$PATH"
bin=$(rest_bigpeer_bin)
ndocs=${BULK_DOCS:-100000}
work=$(mktemp -d /tmp/bigpeer-rest-XXXX); chmod 711 "$work"
port=$(rest_free_port)
${SERVER_PREFIX:-} "$bin" serve --port "$port" --data-dir "$work/data" --db-connections 64 --max-body-bytes $((256<<20)) ${READ_CACHE_MB:+--read-cache-mb $READ_CACHE_MB} --log-level notice >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 200); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
key=$("$bin" keys create --data-dir "$work/data" --description bench --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
cluster="$work/data/postgres"; pgport=$(cat "$work/data/postgres-port")
psql_() { psql -q -h "$cluster" -p "$pgport" -U bigpeer bigpeer "$@"; }
# Seed 100k ~1 KB documents with one bulk statement (timed: the bulk-insert row below).
rest_bulk_json "$work/bulk.json" "$ndocs"
# CPU seconds (utime + stime) of the server, and of the postmaster's children (backends, WAL writer, checkpointer).
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_cpu() { local t=0 p; for p in $(pgrep -P "$(head -1 "$cluster/postmaster.pid")"); do t=$((t + $(cpu_of "$p"))); done; echo $t; }
srv0=$(cpu_of $pid); pg0=$(pg_cpu)
wal() { psql_ -Atc "SELECT pg_current_wal_lsn()"; }
wal0=$(wal)
if [ -n "${PROFILE_BULK:-}" ]; then
  # System-wide (the pool may open the bulk's session after perf starts); keep to this run's
  # processes with: perf report --pid "$(cat $PROFILE_BULK.pids)".
  perf record -q -a -e cpu-clock -F 499 -g -o "$PROFILE_BULK" 2>/dev/null &
  perf_pid=$!; sleep 1
fi
start=$(date +%s.%N)
curl -sf "127.0.0.1:$port/api/v4/store/execute" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' --data-binary @"$work/bulk.json" -o /dev/null || echo "bulk insert failed (see $work/server.log)"
bulk=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
srv1=$(cpu_of $pid); pg1=$(pg_cpu)
wal1=$(wal)
hwm1=$(awk '/VmHWM/ {print $2, $3}' /proc/$pid/status)
if [ -n "${PROFILE_BULK:-}" ]; then
  kill -INT $perf_pid; wait $perf_pid || true
  echo "$pid,$(pgrep -P "$(head -1 "$cluster/postmaster.pid")" | paste -sd,)" > "$PROFILE_BULK.pids"
fi
# The same JSON through COPY into a plain jsonb table, for reference.
python3 -c "
import json; d=list(json.load(open('$work/bulk.json'))['args'].values())
open('$work/copy.txt','w').write(''.join(json.dumps(x).replace('\\\\','\\\\\\\\')+'\n' for x in d))"
psql_ -c "CREATE TABLE copy_ref (value jsonb)"
wal2=$(wal)
start=$(date +%s.%N); psql_ -c "\\copy copy_ref (value) FROM '$work/copy.txt'"; copy=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
wal3=$(wal)
echo "bulk insert $ndocs x ~1 KB: /execute ${bulk}s, COPY ${copy}s ($(uptime | sed 's/.*load/load/'))"
if [ -n "${BULK_ONLY:-}" ]; then
  tck=$(getconf CLK_TCK)
  srv2=$(cpu_of $pid)
  echo "  WAL written: /execute $(psql_ -Atc "SELECT pg_size_pretty(pg_wal_lsn_diff('$wal1', '$wal0'))"), COPY $(psql_ -Atc "SELECT pg_size_pretty(pg_wal_lsn_diff('$wal3', '$wal2'))"); documents $(psql_ -Atc "SELECT pg_size_pretty(pg_total_relation_size('documents'))"), change_log $(psql_ -Atc "SELECT pg_size_pretty(pg_total_relation_size('change_log'))"), copy_ref $(psql_ -Atc "SELECT pg_size_pretty(pg_total_relation_size('copy_ref'))")"
  echo "  server after the response, until the COPY reference ended (its change feed reading the bulk): CPU $(python3 -c "print(round(($srv2 - $srv1) / $tck, 2))")s, peak RSS $(awk '/VmHWM/ {print $2, $3}' /proc/$pid/status)"
  echo "  CPU during /execute: server $(python3 -c "print(round(($srv1 - $srv0) / $tck, 2))")s, PostgreSQL $(python3 -c "print(round(($pg1 - $pg0) / $tck, 2))")s; server peak RSS $hwm1"
  exit 0
fi

pgbench -q -i -s 1 -h "$cluster" -p "$pgport" -U bigpeer bigpeer >/dev/null 2>&1
rest_lua_scripts "$work" "$key" "$ndocs"
reads=${READS:-1}
[ "$reads" = 0 ] || python3 - "$port" "$key" "$ndocs" <<'PY'
import http.client, json, sys, threading, time
port, key, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def read(ids):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in ids:
        body = json.dumps({"statement": "SELECT * FROM bench WHERE _id = :id", "args": {"id": f"d{i}"}})
        c.request("POST", "/api/v4/store/execute", body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        assert r.status == 200, r.status
start = time.time()
threads = [threading.Thread(target=read, args=(range(t, n, 4),)) for t in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(f"warm-up: read all {n} documents once in {time.time() - start:.1f}s")
PY
for c in ${CONCURRENCY:-1 8 64}; do
  # wrk threads: pgbench gets min(c, 8) client threads; wrk gets min(c, WRK_THREADS) (default 2: the
  # Lua that builds each request body kept a single wrk thread near a full core at 8 clients).
  wt=$(( c < ${WRK_THREADS:-2} ? c : ${WRK_THREADS:-2} ))
  for r in $(seq "$rounds"); do
    if [ "$reads" != 0 ]; then
      rr=$(wrk -t$wt -c$c -d${secs}s --latency -s "$work/read.lua" "http://127.0.0.1:$port/api/v4/store/execute" | awk '/Requests\/sec/ {print $2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print p50, p99}' | tr '\n' ' ')
      pr=$(pgbench -n -S -M prepared -T "$secs" -c $c -j $(( c < 8 ? c : 8 )) -h "$cluster" -p "$pgport" -U bigpeer bigpeer 2>/dev/null | sed -nE 's/^tps = ([0-9]+).*/\1/p')
      reads_="point read /execute req/s p50 p99 = $rr| pgbench -S $pr | "
    else reads_=""; fi
    rw=$(wrk -t$wt -c$c -d${secs}s -s "$work/write.lua" "http://127.0.0.1:$port/api/v4/store/execute" | awk '/Requests\/sec/ {print $2}')
    pw=$(pgbench -n -N -T "$secs" -c $c -j $(( c < 8 ? c : 8 )) -h "$cluster" -p "$pgport" -U bigpeer bigpeer 2>/dev/null | sed -nE 's/^tps = ([0-9]+).*/\1/p')
    ru=$(wrk -t$wt -c$c -d${secs}s -s "$work/update.lua" "http://127.0.0.1:$port/api/v4/store/execute" | awk '/Requests\/sec/ {print $2} /Non-2xx/ {print "non-2xx:", $NF}' | tr '\n' ' ')
    echo "c=$c round $r: ${reads_}insert /execute $rw | pgbench -N $pw | update /execute $ru| $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
