#!/usr/bin/env bash
# Builds and runs one libFuzzer target for N seconds.
#
#   scripts/fuzz.sh TARGET [SECONDS] [extra libFuzzer flags...]
#   scripts/fuzz.sh CRDTDecode 600
#
# TARGET is a folder under Fuzz/ holding main.swift (LLVMFuzzerTestOneInput). SwiftPM cannot build
# libFuzzer binaries, so the modules the target needs are compiled here with swiftc, each with
# -sanitize=fuzzer,address (coverage + ASan), then linked with the entry point.
# Corpus: .build-fuzz/corpus/TARGET (kept between runs); crashers: fuzz-artifacts/TARGET/.
# Exit status is libFuzzer's: 0 when the time ran out without a crash.
set -euo pipefail

target="${1:?usage: scripts/fuzz.sh TARGET [SECONDS] [libFuzzer flags...]}"
seconds="${2:-60}"
shift $(( $# >= 2 ? 2 : 1 ))

root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/Fuzz/$target"
[[ -f "$src/main.swift" ]] || { echo "no fuzz target at $src/main.swift" >&2; exit 2; }

# Modules each target links, in dependency order; `sources`: extra files compiled with main.swift;
# C module maps and libraries it needs.
sources=()
c_includes=()
libs=()
case "$target" in
    CRDTDecode) modules=(Values CRDT) ;;
    DQLParse) modules=(Values Quoting CRDT DQL) ;;
    RegexMatch) modules=(Values Quoting CRDT DQL) ;;
    JSONParse) modules=(Values) ;;
    SyncDecode)
        modules=(Values SyncProtocol)
        c_includes=(-I "$root/Sources/COpenSSL")  # KnownState's SHA-256
        libs=(-lcrypto)
        ;;
    DNSMessage) modules=(Discovery) ;;
    DBusMessage) modules=(DBus) ;;
    WSFrame)
        modules=(Sockets WebSocket)
        c_includes=(-I "$root/Sources/CZlib" -I "$root/Sources/COpenSSL")
        libs=(-lz -lssl -lcrypto)
        ;;
    *) echo "unknown fuzz target $target (add its modules to scripts/fuzz.sh)" >&2; exit 2 ;;
esac

# Sources of module $1. The WebSocket module's I/O adapter files (they import HTTP, and HTTP
# needs swift-log) are left out: the fuzzer drives the sans-I/O parser and state machine only.
module_sources() {
    local m="$1" f
    for f in "$root"/Sources/"$m"/*.swift; do
        if [[ "$m" == WebSocket ]] && grep -q -e '^import HTTP' -e 'WebSocketEndpoint' "$f"; then continue; fi
        printf '%s\n' "$f"
    done
}

build="$root/.build-fuzz/$target"
corpus="$root/.build-fuzz/corpus/$target"
artifacts="$root/fuzz-artifacts/$target"
mkdir -p "$build" "$corpus" "$artifacts"

# The header-only CEpoll target has no module map of its own (SwiftPM synthesizes one).
mkdir -p "$build/cepoll"
printf 'module CEpoll {\n    header "%s"\n    export *\n}\n' "$root/Sources/CEpoll/include/CEpoll.h" >"$build/cepoll/module.modulemap"

flags=(-sanitize=fuzzer,address -parse-as-library -O -g -enable-testing -I "$build" -I "$build/cepoll" "${c_includes[@]}")
objects=()
for m in "${modules[@]}"; do
    mapfile -t sources < <(module_sources "$m")
    swiftc "${flags[@]}" -wmo -module-name "$m" -emit-module -emit-module-path "$build/$m.swiftmodule" \
        -c "${sources[@]}" -o "$build/$m.o"
    objects+=("$build/$m.o")
done
swiftc "${flags[@]}" -module-name "${target}Fuzz" "$src/main.swift" ${sources[@]+"${sources[@]}"} "${objects[@]}" ${libs[@]+"${libs[@]}"} -o "$build/fuzz-$target"

# Seed the corpus with valid encodings on the first run.
if [[ -z "$(ls -A "$corpus")" ]]; then
    CRDT_FUZZ_SEEDS="$corpus" "$build/fuzz-$target" -runs=0 >/dev/null 2>&1 || true
fi

exec "$build/fuzz-$target" "$corpus" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "$@"
