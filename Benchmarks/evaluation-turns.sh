#!/usr/bin/env bash
# One client's heavy statement while another client's pile of heavy statements keeps the evaluation
# threads busy: docs/PERFORMANCE.md, "Evaluation turns".
#   Benchmarks/evaluation-turns.sh [seconds-per-phase=15] [pile-connections=12]
# Environment: BIGPEER_BIN=path (skip the release build). Starts `bigpeer serve` on its own data dir
# and a free loopback port, with two API keys; stops by itself after two phases.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build -c release --product bigpeer >/dev/null
  bin=.build/release/bigpeer
fi
work=$(mktemp -d /tmp/bigpeer-turns-XXXX); chmod 711 "$work"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$bin" serve --port "$port" --data-dir "$work/data" --log-level notice >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
key() { "$bin" keys create --data-dir "$work/data" --description "$1" --expires-in 1d --read-all --write-all 2>/dev/null | tail -1; }
pile=$(key pile); other=$(key other)
echo "==> machine: $(nproc) cores; server pid $pid"
python3 Benchmarks/evaluation_turns.py "http://127.0.0.1:$port" "$pile" "$other" "${1:-15}" "${2:-12}"
