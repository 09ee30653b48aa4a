#!/usr/bin/env bash
# bench/lce.sh - issue 46 item 3's figure: the GPT-2 shape's head and loss
# (N = T 256 x batch 4 = 1024 rows, D 256) at vocabulary 8192 and 50257,
# one thread, f32, with the gradients of h and w (mg-bench lce): the fused
# and chunked mg_linear_cross_entropy (default chunk, and 64 rows) against
# mg_cross_entropy(mg_matmul(h, w^T)): predicted and measured pool peak,
# the largest tensor, and the median step time. Writes
# bench/results/linear-ce.txt with the command, commit, date and machine.
#   usage: bash bench/lce.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
repeat=${2:-3}
out=bench/results/linear-ce.txt
{
    echo "# bench/lce.sh $build $repeat"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include bench cuda || echo ' (modified)')"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "\$ OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $build/mg-bench lce --rows 1024 --dim 256 --vocab 8192,50257 --chunks -1,0,64 --repeat $repeat"
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$build/mg-bench" lce \
        --rows 1024 --dim 256 --vocab 8192,50257 --chunks -1,0,64 \
        --repeat "$repeat"
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out.tmp"
mv "$out.tmp" "$out"
cat "$out"
