#!/usr/bin/env bash
# One client's heavy statement while another client's pile of heavy statements keeps the evaluation
# threads busy: docs/PERFORMANCE.md, "Evaluation turns".
#   Benchmarks/evaluation-turns.sh [seconds-per-phase=15] [pile-connections=12]
# Environment: BIGPEER_BIN=path (skip the release build). Starts `bigpeer serve` on its own data dir
# and a free loopback port, with two API keys; stops by itself after two phases.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
. Benchmarks/lib/rest-workload.sh
bin=$(rest_bigpeer_bin)
work=$(mktemp -d /tmp/bigpeer-turns-XXXX); chmod 711 "$work"
port=$(rest_free_port)
rest_serve "$bin" "$work" "$port"
pile=$(rest_key "$bin" "$work/data" pile); other=$(rest_key "$bin" "$work/data" other)
echo "==> machine: $(nproc) cores; server pid $pid"
python3 Benchmarks/evaluation_turns.py "http://127.0.0.1:$port" "$pile" "$other" "${1:-15}" "${2:-12}"
