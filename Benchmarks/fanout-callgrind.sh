#!/usr/bin/env bash
# Server CPU per fan-out delivery as callgrind instruction counts (issue #21): repeatable on a
# shared, noisy machine where wall-clock latency is not. The server runs under
# `valgrind --tool=callgrind` with instrumentation off; once the peers are connected and the writes
# have started, instrumentation is switched on for WINDOW seconds and the profile dumped. The
# deliveries in the window are the calls of `SyncSession.logArrived` that sent `changes` — counted
# from the profile itself, so the window need not line up with the writes.
#   Benchmarks/fanout-callgrind.sh [peers=100] [window=20] [interval-ms=1000]
# Environment: BIGPEER_BIN=path (skip the build), OUT=dir (keep the profile; default a temp dir),
# SIDE=client (profile the `bigpeer bench` peers instead; the server runs natively).
# An interval longer than the window (60000) measures the idle cost of the connected peers.
# Prints the window's instructions, the deliveries and instructions per delivery; the profile
# stays in OUT for `callgrind_annotate --inclusive=yes`.
set -euo pipefail
peers=${1:-100}; window=${2:-20}; interval=${3:-1000}
export PATH="/opt/swift/usr/bin:$PATH"
cd "$(dirname "$0")/.."
. Benchmarks/lib/rest-workload.sh
bin=$(rest_bigpeer_bin)
work=$(mktemp -d /tmp/bigpeer-fanout-cg-XXXX); chmod 711 "$work"
out=${OUT:-$work}; mkdir -p "$out"
# Valgrind 3.19 cannot read the DWARF 5 that swiftc emits (it gives up on the binary): profile a
# copy without debug info (function names come from the symbol table). It also rewrites
# rt_sigsuspend's mask in place, and libdispatch's main thread passes a read-only one: a preloaded
# sigsuspend passes a copy.
objcopy --strip-debug "$bin" "$work/bigpeer"
cat >"$work/sigsuspend.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
int sigsuspend(const sigset_t *mask) { sigset_t copy = *mask; return syscall(SYS_rt_sigsuspend, &copy, 8); }
C
cc -O2 -shared -fPIC -o "$work/sigsuspend.so" "$work/sigsuspend.c"
port=$(rest_free_port); mport=$(rest_free_port)
ulimit -n 65536 2>/dev/null || true
side=${SIDE:-server}
grind=(env LD_PRELOAD="$work/sigsuspend.so" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/$side.cg")
server=("$work/bigpeer"); client=("$work/bigpeer")
if [ "$side" = client ]; then client=("${grind[@]}" "$work/bigpeer"); else server=("${grind[@]}" "$work/bigpeer"); fi
"${server[@]}" serve --port "$port" --data-dir "$work/data" --db-connections 8 --metrics-port "$mport" --log-level warning >"$work/server.log" 2>&1 &
pid=$!
bench=
trap 'kill $bench 2>/dev/null; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work/data"' EXIT
until curl -sf "127.0.0.1:$port/readyz" >/dev/null 2>&1; do
  kill -0 $pid 2>/dev/null || { echo "server did not start:"; cat "$work/server.log"; exit 1; }
  sleep 0.5
done
key=$("$bin" keys create --data-dir "$work/data" --description bench --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
writes=$(( (window * 1000 / interval) * 3 + 20 ))
"${client[@]}" bench sync fanout --url "ws://127.0.0.1:$port" --key "$key" --peers "$peers" --writes "$writes" \
  --interval-ms "$interval" --collection fan >"$work/bench.log" 2>&1 &
bench=$!
# Connected and synced: the writes start right after; wait until some have been delivered.
until curl -sf "127.0.0.1:$mport/metrics" 2>/dev/null | grep -q "^bigpeer_sync_sessions $peers"; do
  kill -0 $bench 2>/dev/null || { cat "$work/bench.log"; exit 1; }
  sleep 1
done
sleep 5
target=$pid; [ "$side" = client ] && target=$bench
callgrind_control -i on $target >/dev/null
sleep "$window"
callgrind_control -d $target >/dev/null
callgrind_control -i off $target >/dev/null
kill $bench 2>/dev/null || true
profile="$out/$side.cg.1"  # the dump of the window (the client writes another as it is killed)
total=$(callgrind_annotate "$profile" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
echo "profile: $profile"
echo "instructions in window: $total"
# Deliveries: on the server the calls of `SyncSession.logArrived` (one per change-log batch a
# session receives; here each brings one `changes`), on the client those of the fan-out's
# `onChanges` (one per `changes` received).
fn='SessionV10logArrived'; [ "$side" = client ] && fn='Fanout.*ChangeEntryVGtYbcfU_ '
deliveries=$(callgrind_annotate --inclusive=yes --tree=caller "$profile" 2>/dev/null | awk -v fn="$fn" 'BEGIN { RS = "" }
  $0 ~ ("\\*  [^\n]*" fn) { n = split($0, lines, "\n"); for (i = 1; i <= n; i++) if (lines[i] ~ /^ *[0-9,]+ .*< / && match(lines[i], /\(([0-9,]+)x\)/)) { c = substr(lines[i], RSTART + 1, RLENGTH - 3); gsub(",", "", c); s += c } }
  END { print s + 0 }')
echo "deliveries in window: $deliveries"
[ "$deliveries" -gt 0 ] && echo "instructions per delivery: $((total / deliveries))"
