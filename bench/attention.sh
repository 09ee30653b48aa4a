#!/usr/bin/env bash
# bench/attention.sh - issue 30's attention figure: one attention layer at
# T = 4096, d = 64, 8 heads, batch 1 (causal, f32) with its gradients, the
# fused op against the composed ops (mg-bench attention): the planner's
# predicted peak beyond q, k, v and the bound gradients, that peak over the
# bytes of q, k, v and o, the largest tensor, and the median step time.
# Writes bench/results/attention.txt with the command, commit, date and
# machine.   usage: bash bench/attention.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
repeat=${2:-3}
out=bench/results/attention.txt
{
    echo "# bench/attention.sh $build $repeat"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include || echo ' (modified)')"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for t in 1 2; do
        echo "\$ OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t $build/mg-bench attention --batch 1 --heads 8 --seq 4096 --dim 64 --causal 1 --repeat $repeat"
        OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$build/mg-bench" attention \
            --batch 1 --heads 8 --seq 4096 --dim 64 --causal 1 --repeat "$repeat"
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out.tmp"
mv "$out.tmp" "$out"
cat "$out"
