#!/usr/bin/env bash
# Read rules (docs/AUTH.md, "Rules"): the cost of a rule on reads, same server, same run,
# interleaved. Two keys read the same documents: one with --read-all, one whose rule
# `bench: n >= 0` is true for every document (so both get identical results and the difference
# is the rule's cost alone).
#   Benchmarks/read-rules.sh [seconds=5] [rounds=3]
# Environment: BIGPEER_BIN=path (skip the build), BULK_DOCS=n (default 10000), CONCURRENCY="1" (point reads),
# READ_CACHE_MB=n (the server's --read-cache-mb; 0 sends every point read to PostgreSQL).
# Rows: point read by _id (wrk, random d<i>; warm: every document read once first), and a
# 1,000-row SELECT (`SELECT * FROM bench LIMIT 1000`, ~1 KB documents).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/lib/rest-workload.sh
secs=${1:-5}; rounds=${2:-3}
export PATH="/opt/swift/usr/bin:$PATH"
bin=$(rest_bigpeer_bin)
ndocs=${BULK_DOCS:-10000}
work=$(mktemp -d /tmp/bigpeer-rules-XXXX); chmod 711 "$work"
port=$(rest_free_port)
"$bin" serve --port "$port" --data-dir "$work/data" --db-connections 16 --max-body-bytes $((64<<20)) ${READ_CACHE_MB:+--read-cache-mb $READ_CACHE_MB} --log-level notice >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 200); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
plain=$("$bin" keys create --data-dir "$work/data" --description plain --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
ruled=$("$bin" keys create --data-dir "$work/data" --description ruled --expires-in 1d --read "bench: n >= 0" 2>/dev/null | tail -1)
rest_bulk_json "$work/bulk.json" "$ndocs"
curl -sf "127.0.0.1:$port/api/v4/store/execute" -H "Authorization: Bearer $plain" -H 'Content-Type: application/json' --data-binary @"$work/bulk.json" -o /dev/null
for k in plain ruled; do
  mkdir -p "$work/$k"; rest_lua_scripts "$work/$k" "${!k}" "$ndocs"
  cat > "$work/$k/select.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer ${!k}"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"statement":"SELECT * FROM bench LIMIT 1000"}'
LUA
done
# Both keys see every document, and the same 1,000 rows.
for k in plain ruled; do
  n=$(curl -sf "127.0.0.1:$port/api/v4/store/execute" -H "Authorization: Bearer ${!k}" -H 'Content-Type: application/json' \
      -d '{"statement":"SELECT * FROM bench LIMIT 1000"}' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')
  [ "$n" = 1000 ] || { echo "$k: SELECT returned $n rows"; exit 1; }
done
python3 - "$port" "$plain" "$ndocs" <<'PY'
import http.client, json, sys
port, key, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port)
for i in range(n):
    c.request("POST", "/api/v4/store/execute", json.dumps({"statement": "SELECT * FROM bench WHERE _id = :id", "args": {"id": f"d{i}"}}),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse(); r.read(); assert r.status == 200
PY
# req/s, then the server's CPU per request in µs (utime + stime from /proc: steadier than req/s on a
# loaded machine, and PostgreSQL's share is the same for both keys but for the rule's conjunct).
tck=$(getconf CLK_TCK)
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() {
  local c0 out; c0=$(cpu_of $pid)
  out=$(wrk -t$(( $1 < 2 ? $1 : 2 )) -c$1 -d${secs}s -s "$2" "http://127.0.0.1:$port/api/v4/store/execute")
  local rps; rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  echo "$out" | awk '/Non-2xx/ {printf "non-2xx: %s ", $NF}'
  python3 -c "print(f'{$rps} ({($(cpu_of $pid) - $c0) / $tck * 1e6 / max(1, $rps * $secs):.0f} µs CPU)', end=' ')"
}
# The SELECT runs with one client: 1,000 rows of ~1 KB are past the probe, so each one holds one of
# the server's large-result slots (more clients get 503 busy, counted as non-2xx).
for c in ${CONCURRENCY:-1}; do
  for r in $(seq "$rounds"); do
    pp=$(run $c "$work/plain/read.lua"); pr=$(run $c "$work/ruled/read.lua")
    line="c=$c round $r: point read req/s plain $pp| ruled $pr"
    if [ "$c" = 1 ]; then
      sp=$(run 1 "$work/plain/select.lua"); sr=$(run 1 "$work/ruled/select.lua")
      line="$line| 1000-row SELECT req/s plain $sp| ruled $sr"
    fi
    echo "$line| $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
