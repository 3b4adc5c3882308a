#!/usr/bin/env bash
# Two bigpeer binaries, alternated on ONE warm PostgreSQL cluster, against pgbench -N in between:
# single-document UPDATE by a random `_id` (and optionally INSERT) with CPU per request.
#   Benchmarks/write-ab.sh BIN_A BIN_B [seconds=5] [rounds=3]
# Environment: CONCURRENCY="8" (clients), BULK_DOCS=n (default 100000 ~1 KB documents),
# ROWS="update" (any of: update insert), WRK_THREADS=n (default 2), PERF_DIR=dir (perf record the
# server during each measured row into dir/ROW:a.perf, ROW:b.perf; it costs the server CPU).
# Unlike rest.sh, the servers are restarted between rows while PostgreSQL keeps running (the first
# server creates the cluster; it is then stopped and the cluster started by this script, so the
# servers only attach to it), so both binaries meet the same shared buffers and the same table.
# Per row: requests/s, the CPU (utime + stime from /proc/PID/stat) per request of the server, of
# PostgreSQL (every child of the postmaster) and of wrk/pgbench, the transactions committed per
# request (bigpeer_txn; 1/batch size), and the load average. The machine is shared: compare ratios
# inside one round, never numbers across runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/lib/rest-workload.sh
bin_a=$1; bin_b=$2; secs=${3:-5}; rounds=${4:-3}
ndocs=${BULK_DOCS:-100000}
work=$(mktemp -d /tmp/bigpeer-ab-XXXX); chmod 711 "$work"
cluster="$work/data/postgres"
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pid=""
stop_server() { if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; fi; }
pgctl() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- pg_ctl "$@"; else pg_ctl "$@"; fi; }
cleanup() { stop_server; pgctl -D "$cluster" -m fast -w stop >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
start_server() {  # $1 binary
  port=$(free_port)
  "$1" serve --port "$port" --data-dir "$work/data" --db-connections 64 --max-body-bytes $((256<<20)) --log-level notice >>"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && return; sleep 0.1; done
  echo "server $1 did not start (see $work/server.log)"; exit 1
}
start_server "$bin_a"
key=$("$bin_a" keys create --data-dir "$work/data" --description bench --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
pgport=$(cat "$work/data/postgres-port")
psql_() { psql -q -h "$cluster" -p "$pgport" -U bigpeer bigpeer "$@"; }
rest_bulk_json "$work/bulk.json" "$ndocs"
curl -sf "127.0.0.1:$port/api/v4/store/execute" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' --data-binary @"$work/bulk.json" -o /dev/null
pgbench -q -i -s 1 -h "$cluster" -p "$pgport" -U bigpeer bigpeer >/dev/null 2>&1
# Take the cluster over: stop the owning server (it stops PostgreSQL), start PostgreSQL as it did.
stop_server
opts="-c port=$pgport -c listen_addresses=127.0.0.1 -c unix_socket_directories=$cluster -c max_connections=200 -c logging_collector=off"
pgctl -D "$cluster" -l "$cluster/server.log" -w -t 60 -o "$opts" start >/dev/null
rest_lua_scripts "$work" "$key" "$ndocs"
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_cpu() { local t=0 p; for p in $(pgrep -P "$(head -1 "$cluster/postmaster.pid")"); do t=$((t + $(cpu_of "$p"))); done; echo $t; }
txn() { psql_ -Atc "SELECT n FROM bigpeer_txn"; }
# PostgreSQL transactions committed in the database. A backend's counts reach pg_stat_database
# when it exits (idle pooled sessions may hold them for 10 s), so they are read per server run,
# before it starts and after it stopped, and divided by all its requests (warm-ups included).
xacts() { psql_ -Atc "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
tck=$(getconf CLK_TCK)
# $1 label, $2 requests, $3 server ticks, $4 PostgreSQL ticks, $5 client ticks, $6 transactions
row() { python3 -c "
n=$2; t=$tck
print('%-10s %8.0f req/s  CPU/req us: server %4.0f  PostgreSQL %4.0f  client %4.0f  txn/req %s' % ('$1', n/$secs, $3*1e6/t/max(n,1), $4*1e6/t/max(n,1), $5*1e6/t/max(n,1), '%.2f' % (${6:-0}/max(n,1))))"; }
run_wrk() {  # $1 label, $2 lua
  local c=$3 wt s0 p0 t0 out
  wt=$(( c < ${WRK_THREADS:-2} ? c : ${WRK_THREADS:-2} ))
  wrk -t$wt -c$c -d1s -s "$work/$2" "http://127.0.0.1:$port/api/v4/store/execute" >"$work/warm.out"  # warm the sessions
  served=$((served + $(awk '/requests in/ {print $1}' "$work/warm.out")))
  s0=$(cpu_of $pid); p0=$(pg_cpu); t0=$(txn)
  local perf_pid=""
  if [ -n "${PERF_DIR:-}" ]; then
    perf record -q -g -F 999 -p "$pid" -o "$PERF_DIR/$1.perf" 2>/dev/null & perf_pid=$!
  fi
  wrk -t$wt -c$c -d${secs}s -s "$work/$2" "http://127.0.0.1:$port/api/v4/store/execute" >"$work/wrk.out" &
  local w=$!; sleep "$(awk "BEGIN{print $secs - 0.3}")"; local wc; wc=$(cpu_of $w); wait $w
  local s1 p1 t1 n
  s1=$(cpu_of $pid); p1=$(pg_cpu); t1=$(txn)
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
  n=$(awk '/requests in/ {print $1}' "$work/wrk.out")
  served=$((served + n))
  grep -q 'Non-2xx' "$work/wrk.out" && echo "  $(grep Non-2xx "$work/wrk.out")"
  row "$1" "$n" $((s1 - s0)) $((p1 - p0)) "$wc" $((t1 - t0))
}
for c in ${CONCURRENCY:-8}; do
  for r in $(seq "$rounds"); do
    echo "c=$c round $r ($(cut -d' ' -f1-3 /proc/loadavg))"
    for which in a b; do
      if [ $which = a ]; then b=$bin_a; else b=$bin_b; fi
      x0=$(xacts); served=0
      start_server "$b"
      for kind in ${ROWS:-update}; do run_wrk "$kind:$which" "${kind/insert/write}.lua" "$c"; done
      stop_server
      # Every PostgreSQL commit of that server run (its change feed's reads included) per request;
      # the two psql probes per row and this one commit too, a handful against thousands.
      sleep 0.5; x1=$(xacts)  # its backends flush their statistics as they exit
      python3 -c "print('  %s: PostgreSQL commits/request over the server run %.2f' % ('$which', ($x1 - $x0) / max($served, 1)))"
    done
    p0=$(pg_cpu)
    pgbench -n -N -T "$secs" -c "$c" -j $(( c < 8 ? c : 8 )) -h "$cluster" -p "$pgport" -U bigpeer bigpeer >"$work/pgb.out" 2>&1 &
    # pgbench's backends exit with it: sample PostgreSQL just before the end.
    w=$!; sleep "$(awk "BEGIN{print $secs - 0.3}")"; wc=$(cpu_of $w); p1=$(pg_cpu); wait $w
    n=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/pgb.out")
    [ -n "$n" ] || { echo "pgbench failed:"; cat "$work/pgb.out"; n=0; }
    row "pgbench-N" "$n" 0 $((p1 - p0)) "$wc" ""
    echo "  load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
