#!/usr/bin/env bash
# Round trips per second through BigPeer's Postgres module vs pgbench, same cluster, same run.
#   Benchmarks/postgres.sh [seconds=10] [rounds=3]
# Environment:
#   SCRATCH=.build-x   build folder for `swift build` (default .build)
#   BASELINE=path      an older bigpeer binary to run too, interleaved (before/after comparisons;
#                      it is given the old flags: --query point|select1 [--prepared])
#   CLIENTS="1 8"      client counts
# Creates a throwaway cluster (via `bigpeer migrate --data-dir`), loads pgbench tables (scale 10),
# then for each client count runs, interleaved per round, each case on both sides with the SAME
# protocol (pgbench -M and bigpeer --protocol):
#   point-simple     pgbench -S -M simple       vs bigpeer --query point   --protocol simple
#   point-extended   pgbench -S -M extended     vs bigpeer --query point   --protocol extended
#   point-prepared   pgbench -S -M prepared     vs bigpeer --query point   --protocol prepared
#   select1-simple   pgbench -f select1.sql     vs bigpeer --query select1 --protocol simple
#   select1-extended pgbench -f select1.sql -M extended vs bigpeer --query select1 --protocol extended
# Neither side reads the returned values (pgbench never does without \gset); both receive and free
# every result. Both sides run one client thread per client: pgbench -j N, bigpeer --threads N (one
# event loop per client; the client task and its session live on that loop). Equal thread counts
# matter on a small machine: the scheduler shares the cores per runnable thread, so a side with
# fewer threads than the 8 server backends gets less CPU (docs/PERFORMANCE.md, Postgres section).
# Both connect over the same unix socket; the load generator shares the cores.
# Prints, per case, the median tps of each side and bigpeer's share of pgbench's median.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}; rounds=${2:-3}
scratch=${SCRATCH:-.build}
export PATH="/opt/swift/usr/bin:$PATH"
swift build -c release --scratch-path "$scratch" --product bigpeer >/dev/null
bin=$scratch/release/bigpeer
dir=$(mktemp -d /tmp/bigpeer-pgbench-XXXX); chmod 711 "$dir"
$bin migrate --data-dir "$dir" >/dev/null 2>&1   # creates the cluster, then stops it
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
port=$(cat "$dir/postgres-port"); cluster="$dir/postgres"
as_pg "$pgbin/pg_ctl" -D "$cluster" -l "$cluster/server.log" -w \
  -o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$cluster -c max_connections=100" start >/dev/null
trap 'as_pg "$pgbin/pg_ctl" -D "$cluster" -m fast -w stop >/dev/null; rm -rf "$dir"' EXIT
url="postgresql://bigpeer@/bigpeer?host=$cluster&port=$port"
pg=(-h "$cluster" -p "$port" -U bigpeer bigpeer)
pgbench -q -i -s 10 "${pg[@]}" >/dev/null 2>&1
echo 'SELECT 1;' > "$dir/select1.sql"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

declare -A results cpu
run() { # key command...: records tps and the client's CPU (user+sys) per transaction in µs
  local key=$1; shift
  local out tps u s
  out=$(/usr/bin/time -o "$dir/cputime" -f "%U %S" "$@" 2>/dev/null)
  tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+).*/\1/p' | head -1 | cut -d. -f1)
  read -r u s < "$dir/cputime"
  results[$key]+="${tps:-0} "
  cpu[$key]+="$(awk -v t="${tps:-0}" -v u="${u:-0}" -v s="${s:-0}" -v d="$secs" 'BEGIN { printf "%.1f", (t > 0 ? (u + s) * 1e6 / (t * d) : 0) }') "
}
cases="point-simple point-extended point-prepared select1-simple select1-extended"
for c in ${CLIENTS:-1 8}; do
  for r in $(seq "$rounds"); do
    for case in $cases; do
      query=${case%-*}; mode=${case#*-}
      if [ "$query" = point ]; then script=(-S); else script=(-f "$dir/select1.sql"); fi
      run "$case c$c pgbench" pgbench -n "${script[@]}" -M "$mode" -T "$secs" -c "$c" -j "$c" "${pg[@]}"
      run "$case c$c bigpeer" $bin bench postgres --database-url "$url" --clients "$c" --threads "$c" --seconds "$secs" \
        --scale 10 --query "$query" --protocol "$mode"
      if [ -n "${BASELINE:-}" ] && [ "$mode" != simple ]; then
        old=(); [ "$mode" = prepared ] && old=(--prepared)
        run "$case c$c baseline" "$BASELINE" bench postgres --database-url "$url" --clients "$c" --threads "$c" --seconds "$secs" \
          --scale 10 --query "$query" "${old[@]}"
      fi
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}'; }
share() { [ -n "$1" ] && [ "$2" -gt 0 ] && echo "$(( 100 * $1 / $2 ))%" || echo -; }
fmedian() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "median tps (share of pgbench) and client CPU µs per transaction (user+sys, /usr/bin/time)"
printf '%-22s %9s %9s %6s %9s %6s | %8s %8s %8s   %s\n' case pgbench bigpeer share baseline share "cpu pgb" "cpu bp" "cpu base" "tps rounds (pgbench / bigpeer / baseline)"
for c in ${CLIENTS:-1 8}; do
  for case in $cases; do
    k="$case c$c"
    p=$(echo "${results[$k pgbench]}" | median); b=$(echo "${results[$k bigpeer]}" | median)
    o=""; oc="-"
    if [ -n "${results[$k baseline]:-}" ]; then
      o=$(echo "${results[$k baseline]}" | median); oc=$(echo "${cpu[$k baseline]}" | fmedian)
    fi
    printf '%-22s %9s %9s %6s %9s %6s | %8s %8s %8s   %s/ %s/ %s\n' "$k" "$p" "$b" "$(share "$b" "$p")" "${o:--}" "$(share "$o" "$p")" \
      "$(echo "${cpu[$k pgbench]}" | fmedian)" "$(echo "${cpu[$k bigpeer]}" | fmedian)" "$oc" \
      "${results[$k pgbench]}" "${results[$k bigpeer]}" "${results[$k baseline]:-}"
  done
done
