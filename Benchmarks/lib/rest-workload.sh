# The REST workload shared by Benchmarks/rest.sh and Benchmarks/write-ab.sh (sourced, not run).
#
#   rest_bulk_json FILE N        one /execute body inserting N ~1 KB documents d0..d(N-1) into `bench`
#   rest_lua_scripts DIR KEY N   wrk scripts in DIR: read.lua (point read of a random d<i>),
#                                write.lua (INSERT with a generated _id), update.lua (UPDATE of a
#                                random d<i> by _id, seeded)
#   rest_bigpeer_bin             echo the bigpeer binary: $BIGPEER_BIN, else a fresh release build
#   rest_free_port               echo a free TCP port on 127.0.0.1
#   rest_wait_ready PORT         wait (at most 30 s) until the server on PORT answers /readyz
#   rest_serve BIN WORK PORT [FLAG...]  start `bigpeer serve` on WORK/data (log WORK/server.log), set
#                                $pid, stop it and remove WORK on exit, wait until it is ready
#   rest_key BIN DATA NAME       echo a new API key (read and write everything, 1 day) of the data dir

rest_bulk_json() {
  python3 - "$1" "$2" <<'PY'
import json, sys
pad = "x" * 900
n = int(sys.argv[2])
args = {f"d{i}": {"_id": f"d{i}", "n": i, "pad": pad} for i in range(n)}
statement = "INSERT INTO bench DOCUMENTS " + ", ".join(f"(:d{i})" for i in range(n))
json.dump({"statement": statement, "args": args}, open(sys.argv[1], "w"))
PY
}

rest_lua_scripts() {
  local dir=$1 key=$2 n=$3
  local head="wrk.method = \"POST\"
wrk.headers[\"Authorization\"] = \"Bearer $key\"
wrk.headers[\"Content-Type\"] = \"application/json\""
  cat > "$dir/read.lua" <<LUA
$head
request = function()
  return wrk.format(nil, nil, nil, '{"statement":"SELECT * FROM bench WHERE _id = :id","args":{"id":"d' .. math.random(0, $((n - 1))) .. '"}}')
end
LUA
  cat > "$dir/write.lua" <<LUA
$head
counter = 0
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, '{"statement":"INSERT INTO w DOCUMENTS ({n: ' .. counter .. ', t: \'x\'})"}')
end
LUA
  cat > "$dir/update.lua" <<LUA
$head
math.randomseed(7)
request = function()
  return wrk.format(nil, nil, nil, '{"statement":"UPDATE bench SET n = n + 1 WHERE _id = :id","args":{"id":"d' .. math.random(0, $((n - 1))) .. '"}}')
end
LUA
}

rest_bigpeer_bin() {
  if [ -n "${BIGPEER_BIN:-}" ]; then echo "$BIGPEER_BIN"; return; fi
  swift build -c release --product bigpeer >/dev/null
  echo .build/release/bigpeer
}

rest_free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

rest_wait_ready() {
  for _ in $(seq 1 300); do curl -sf "127.0.0.1:$1/readyz" >/dev/null && return 0; sleep 0.1; done
  echo "the server on port $1 did not become ready" >&2; return 1
}

rest_key() {
  "$1" keys create --data-dir "$2" --description "$3" --expires-in 1d --read-all --write-all 2>/dev/null | tail -1
}

rest_serve() {
  local bin=$1 work=$2 port=$3
  shift 3
  "$bin" serve --port "$port" --data-dir "$work/data" --log-level notice "$@" >"$work/server.log" 2>&1 &
  pid=$!
  # shellcheck disable=SC2064  # expanded now: these values, whatever the caller does later
  trap "kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf '$work'" EXIT
  rest_wait_ready "$port"
}
