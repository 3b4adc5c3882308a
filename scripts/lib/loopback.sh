# Sourced by the scripts that start servers on loopback (test-server.sh, nginx-front.sh,
# deploy-check.sh, Benchmarks/rolling-restart.sh).

# A TCP port free on 127.0.0.1 now (another process may take it before it is bound: tests only).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

# wait_ready URL [PID]: polls URL for up to 60 s; fails early if PID (the server) has exited.
wait_ready() {
  local url=$1 pid=${2:-}
  for _ in $(seq 1 300); do
    curl -sf "$url" >/dev/null 2>&1 && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.2
  done
  return 1
}
