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

# Modules each target links, in dependency order; `sources`: extra files compiled with main.swift.
sources=()
case "$target" in
    CRDTDecode) modules=(Values CRDT) ;;
    DQLParse) modules=(Values DQL) ;;
    JSONParse) modules=(Values) ;;
    # The sync codec needs only Values: its files are compiled into the fuzz binary itself.
    SyncDecode) modules=(Values)
                sources=("$root"/Sources/Sync/SyncMessage*.swift "$root"/Sources/Sync/SyncProtocolError.swift
                         "$root"/Sources/Sync/SyncLimits.swift "$root"/Sources/Sync/DocumentHash.swift) ;;
    *) echo "unknown fuzz target $target (add its modules to scripts/fuzz.sh)" >&2; exit 2 ;;
esac

build="$root/.build-fuzz/$target"
corpus="$root/.build-fuzz/corpus/$target"
artifacts="$root/fuzz-artifacts/$target"
mkdir -p "$build" "$corpus" "$artifacts"

flags=(-sanitize=fuzzer,address -parse-as-library -O -g -I "$build")
objects=()
for m in "${modules[@]}"; do
    swiftc "${flags[@]}" -wmo -module-name "$m" -emit-module -emit-module-path "$build/$m.swiftmodule" \
        -c "$root"/Sources/"$m"/*.swift -o "$build/$m.o"
    objects+=("$build/$m.o")
done
swiftc "${flags[@]}" -module-name "${target}Fuzz" "$src/main.swift" ${sources[@]+"${sources[@]}"} "${objects[@]}" -o "$build/fuzz-$target"

# Seed the corpus with valid encodings on the first run.
if [[ -z "$(ls -A "$corpus")" ]]; then
    CRDT_FUZZ_SEEDS="$corpus" "$build/fuzz-$target" -runs=0 >/dev/null 2>&1 || true
fi

exec "$build/fuzz-$target" "$corpus" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "$@"
