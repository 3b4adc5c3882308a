#!/usr/bin/env bash
# Sync fan-out with a different read rule per peer (issue #21, docs/PERFORMANCE.md "Auth"): a REST
# write reaches P subscribed peers; in the "rules" rounds each peer logs in with its own JWT whose
# rule `n >= 0 AND n != -(i+1)` no other session shares (so nothing is evaluated once for all),
# in the "plain" rounds every peer uses one unrestricted API key. Same server, same run, interleaved.
# Goal: p99 < 50 ms with rules.
#   Benchmarks/fanout-rules.sh [peers=1000] [writes=50] [rounds=2]
# Environment: BIGPEER_BIN=path (skip the build). The peers, the server and PostgreSQL share the
# machine's cores: say so when quoting the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/lib/rest-workload.sh
. scripts/lib/loopback.sh
peers=${1:-1000}; writes=${2:-50}; rounds=${3:-2}
export PATH="/opt/swift/usr/bin:$PATH"
bin=$(rest_bigpeer_bin)
work=$(mktemp -d /tmp/bigpeer-fanout-rules-XXXX); chmod 711 "$work"
head -c 48 /dev/urandom | base64 > "$work/jwt-secret"
port=$(free_port)
ulimit -n 65536 2>/dev/null || true
"$bin" serve --port "$port" --data-dir "$work/data" --db-connections 16 --jwt-secret-file "$work/jwt-secret" --log-level warning >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
wait_ready "127.0.0.1:$port/readyz" "$pid" || { echo "server did not start:"; cat "$work/server.log"; exit 1; }
key=$("$bin" keys create --data-dir "$work/data" --description bench --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores shared by the peers, the server and PostgreSQL"
for round in $(seq 1 "$rounds"); do
  for mode in plain rules; do
    extra=(); [ "$mode" = rules ] && extra=(--rule-per-peer-secret-file "$work/jwt-secret")
    printf 'round %s %-6s ' "$round" "$mode"
    "$bin" bench sync fanout --url "ws://127.0.0.1:$port" --key "$key" --peers "$peers" --writes "$writes" \
      --collection "fan_${mode}_$round" "${extra[@]}"
  done
done
echo "server CPU (user+sys ticks): $(awk '{ print $14 + $15 }' /proc/$pid/stat); load after: $(cut -d' ' -f1-3 /proc/loadavg)"
