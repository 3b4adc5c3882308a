# Sourced by the conformance scripts (schemathesis.sh, python-sync-client.sh): builds `bigpeer`
# unless BIGPEER_BIN is set, starts `bigpeer serve` on a free loopback port with a private
# PostgreSQL in a temporary data directory, waits for /readyz, and stops it (and removes the
# directory) on exit. Sets: bin, port, work (the scratch directory), server_pid.
# The caller may set `extra_cleanup` to a command run first on exit.
# Usage: test_server_start NAME   (NAME only labels the scratch directory)

. "$(dirname "${BASH_SOURCE[0]}")/loopback.sh"

test_server_start() {
  bin="${BIGPEER_BIN:-}"
  if [ -z "$bin" ]; then
    echo "==> building bigpeer"
    swift build --product bigpeer
    bin="$(swift build --show-bin-path)/bigpeer"
  fi
  port=$(free_port)
  work=$(mktemp -d "/tmp/bigpeer-$1.XXXXXX")
  server_pid=""
  trap test_server_cleanup EXIT
  echo "==> starting bigpeer serve on 127.0.0.1:$port (log: $work/server.log)"
  "$bin" serve --host 127.0.0.1 --port "$port" --threads 2 --data-dir "$work/data" >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port/readyz" "$server_pid" || { tail -50 "$work/server.log"; echo "bigpeer serve did not become ready"; exit 1; }
}

test_server_cleanup() {
  if [ -n "${extra_cleanup:-}" ]; then eval "$extra_cleanup"; fi
  if [ -n "${server_pid:-}" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"  # drains and stops its private PostgreSQL
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "${work:-/nonexistent-bigpeer-scratch}"
}

# An API key for the running server (same database, through the CLI): test_server_key DESCRIPTION [scope flags...]
test_server_key() {
  local description=$1; shift
  local k
  k=$("$bin" keys create --data-dir "$work/data" --description "$description" --expires-in 1d "$@" 2>>"$work/keys.log" | tail -1)
  [ -n "$k" ] || { cat "$work/keys.log"; echo "could not create an API key ($description)" >&2; exit 1; }
  echo "$k"
}
