#!/usr/bin/env bash
# Build the ONNX importer's libFuzzer harness with clang, ASan and UBSan in
# build-fuzz/ and run it for a bounded time from the test models
# (tests/data/*.onnx) and the inputs that once crashed it
# (tests/fuzz/regressions/, which test_onnx also imports). Exits non-zero if libFuzzer finds a crash, a leak, an
# overread or an allocation past the limits; the input that did it is left
# in build-fuzz/crash-*. Prints libFuzzer's final stats (executions).
#
#   usage: bash scripts/fuzz-onnx.sh [SECONDS]     (default 60)
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
cmake --build build-fuzz -j2 --target fuzz_onnx
corpus=build-fuzz/fuzz-corpus
mkdir -p "$corpus"
cp tests/data/*.onnx tests/fuzz/regressions/* "$corpus"/
cd build-fuzz
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ./fuzz_onnx -max_total_time="$seconds" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 \
    fuzz-corpus 2>&1 | tail -n 40
exit "${PIPESTATUS[0]}"
