#!/usr/bin/env bash
# Build the ONNX importer's libFuzzer harnesses with clang, ASan and UBSan in
# build-fuzz/ and run them for a bounded total time, split between the two:
# fuzz_onnx (any bytes, external data pointing nowhere) and
# fuzz_onnx_extdata (a real external-data directory with a link, a FIFO and
# a secret beside it). Corpus: the test models (tests/data/*.onnx), the
# seeds of the hostile cases (tests/fuzz/seeds/, written by make_seeds.py)
# and the inputs that once crashed the importer (tests/fuzz/regressions/,
# which test_onnx also imports); dictionary tests/fuzz/onnx.dict. Exits
# non-zero if libFuzzer finds a crash, a leak, an overread, a hang or an
# allocation past the limits; the input that did it is left in
# build-fuzz/crash-* (or timeout-*). Prints libFuzzer's final stats
# (executions) for each harness.
#
#   usage: bash scripts/fuzz-onnx.sh [SECONDS]     (default 60, in all)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-60}
if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz-onnx.sh: clang not found (Debian: clang, libclang-rt-dev)" >&2
    exit 1
fi
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DMG_SANITIZE=ON \
    -DMG_BUILD_FUZZ=ON -DMG_BUILD_TESTS=OFF -DMG_BUILD_EXAMPLES=OFF \
    -DMG_BUILD_BENCH=OFF -DMG_WITH_CUDA=OFF >/dev/null
cmake --build build-fuzz -j2 --target fuzz_onnx fuzz_onnx_extdata
first=$(( seconds / 2 ))
[ "$first" -ge 1 ] || first=1
second=$(( seconds - first ))
[ "$second" -ge 1 ] || second=1
rc=0
for pair in "fuzz_onnx:$first" "fuzz_onnx_extdata:$second"; do
    harness=${pair%%:*}
    corpus=build-fuzz/corpus-$harness
    mkdir -p "$corpus"
    cp tests/data/*.onnx tests/fuzz/seeds/* tests/fuzz/regressions/* "$corpus"/
    echo "fuzz-onnx.sh: $harness for ${pair##*:} s"
    (cd build-fuzz &&
     ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
         "./$harness" -max_total_time="${pair##*:}" -rss_limit_mb=2048 \
         -malloc_limit_mb=1024 -max_len=65536 -timeout=20 \
         -dict=../tests/fuzz/onnx.dict -print_final_stats=1 \
         "corpus-$harness" 2>&1 | tail -n 40
     exit "${PIPESTATUS[0]}") || rc=1
done
exit "$rc"
