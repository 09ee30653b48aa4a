#!/usr/bin/env bash
# bench/pareto.sh - issue 17's Pareto curves: memory against time for the
# MLP at depth 1024 (batch 1024, width 256), the ResNet (32 blocks,
# batch 16) and the MLP at depth 256 with dropout 0.1 after each relu (its
# relu outputs are read backward only for their signs, so compaction
# keeps 1 bit of each: pareto-mlp-dropout.csv), memgrad's budget policy
# beside its memory policy and PyTorch's checkpoint_sequential at 2..64
# segments, each model measured in one run of bench/pareto.py; then
# bench/plot draws bench/results/pareto-*.svg.
# bench/results/pareto.txt keeps the command lines, the machine, the load
# and each run's table of points and dominance.
#
#   usage: bench/pareto.sh [BUILD_DIR]     (default: build-bench, the
#          Release build bench/run.sh makes; this script builds mg-bench there)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build-bench}")
txt="$here/results/pareto.txt"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target mg-bench >/dev/null
# Debian 12's OpenBLAS falls back to slow kernels on some newer CPUs.
source "$root/scripts/blas-env.sh"
{
    date -u
    git -C "$root" log --oneline -1
    echo "machine: $(nproc)-core CPU VM ($(uname -m)), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}"
    for c in "mlp|--model mlp --depth 1024" "resnet|--model resnet --depth 32 --batch 16" \
        "mlp-dropout|--model mlp --depth 256 --dropout 0.1"; do
        model=${c%%|*} args=${c#*|}
        echo
        uptime
        echo "\$ /usr/bin/python3 bench/pareto.py $args --mg-bench ${build#$root/}/mg-bench"
        # shellcheck disable=SC2086
        /usr/bin/python3 "$here/pareto.py" $args --mg-bench "$build/mg-bench" \
            --csv "$here/results/pareto-$model.csv" 2>&1 | grep -v '^\[pareto\]'
    done
    uptime
} | tee "$txt"
bash "$here/plot" "$here"/results/pareto-*.csv
