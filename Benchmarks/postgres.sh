#!/usr/bin/env bash
# Round trips per second through BigPeer's Postgres module vs pgbench, same cluster, same run.
#   Benchmarks/postgres.sh [seconds=10] [rounds=3]
# Creates a throwaway cluster (via `bigpeer migrate --data-dir`), loads pgbench tables (scale 10),
# then for 1 and 8 clients runs, interleaved per round: pgbench -S (simple), bigpeer point select,
# pgbench -S -M prepared, bigpeer point select prepared, and SELECT 1 both ways. Prints medians.
# Both sides connect over the same unix socket. The load generator shares the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}; rounds=${2:-3}
export PATH="/opt/swift/usr/bin:$PATH"
swift build -c release --product bigpeer >/dev/null
bin=.build/release/bigpeer
dir=$(mktemp -d /tmp/bigpeer-pgbench-XXXX); chmod 711 "$dir"
$bin migrate --data-dir "$dir" >/dev/null 2>&1   # creates the cluster, then stops it
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
port=$(cat "$dir/postgres-port"); cluster="$dir/postgres"
as_pg "$pgbin/pg_ctl" -D "$cluster" -l "$cluster/server.log" -w \
  -o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$cluster -c max_connections=100" start >/dev/null
trap 'as_pg "$pgbin/pg_ctl" -D "$cluster" -m fast -w stop >/dev/null; rm -rf "$dir"' EXIT
url="postgresql://bigpeer@/bigpeer?host=$cluster&port=$port"
pgbench -q -i -s 10 -h "$cluster" -p "$port" -U bigpeer bigpeer >/dev/null 2>&1
echo 'SELECT 1;' > "$dir/select1.sql"

declare -A results
run() { # name command...
  local name=$1; shift
  local tps
  tps=$("$@" 2>/dev/null | sed -nE 's/^tps = ([0-9.]+).*/\1/p' | head -1 | cut -d. -f1)
  results[$name]+="$tps "
}
for c in 1 8; do
  for r in $(seq "$rounds"); do
    run "pgbench-S-c$c" pgbench -n -S -T "$secs" -c "$c" -j "$c" -h "$cluster" -p "$port" -U bigpeer bigpeer
    run "bigpeer-point-c$c" $bin bench postgres --database-url "$url" --clients "$c" --seconds "$secs" --scale 10 --query point
    run "pgbench-S-prepared-c$c" pgbench -n -S -M prepared -T "$secs" -c "$c" -j "$c" -h "$cluster" -p "$port" -U bigpeer bigpeer
    run "bigpeer-point-prepared-c$c" $bin bench postgres --database-url "$url" --clients "$c" --seconds "$secs" --scale 10 --query point --prepared
    run "pgbench-select1-c$c" pgbench -n -f "$dir/select1.sql" -T "$secs" -c "$c" -j "$c" -h "$cluster" -p "$port" -U bigpeer bigpeer
    run "bigpeer-select1-c$c" $bin bench postgres --database-url "$url" --clients "$c" --seconds "$secs" --query select1
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}'; }
printf '%-32s %10s   %s\n' "case" "median tps" "all rounds"
for k in $(printf '%s\n' "${!results[@]}" | sort); do
  printf '%-32s %10s   %s\n' "$k" "$(echo "${results[$k]}" | median)" "${results[$k]}"
done
