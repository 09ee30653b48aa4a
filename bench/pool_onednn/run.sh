#!/usr/bin/env bash
# bench/pool_onednn/run.sh - pooling through oneDNN against memgrad's loops
# (issue 14): compiles bench.c against BUILD's libmemgrad.a (a build with
# oneDNN) and runs it; OMP_NUM_THREADS sets the thread count.
#
#   usage: bash bench/pool_onednn/run.sh BUILD [ROUNDS] [REPS]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs="$(pkg-config --libs igraph openblas) -ldnnl -fopenmp -lm -lpthread"
# a build with the CUDA backend links its runtime too
if nm "$build/libmemgrad.a" 2>/dev/null | grep cublasSgemm >/dev/null; then
    libs="$libs -L/usr/local/cuda/lib64 -lcublas -lcudart -lstdc++"
fi
# shellcheck disable=SC2086
cc -O2 -I"$here/../../include" "$here/bench.c" "$build/libmemgrad.a" $libs \
    -o "$tmp/pool-bench"
"$tmp/pool-bench" "${2:-3}" "${3:-20}"
