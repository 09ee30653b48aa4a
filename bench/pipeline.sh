#!/usr/bin/env bash
# bench/pipeline.sh - pipeline-parallel training (issue 31,
# memgrad_pipeline.h) of a 16-layer MLP at 1, 2 and 4 ranks (mpirun,
# oversubscribed at 4 on this 2-core machine): per schedule, policy and
# microbatch count, the largest stage's predicted and measured pool peak
# against max_bytes = the one-rank plain-backprop peak (the model fits one
# rank's max_bytes under policy none, and must still fit at 2 and 4), the
# median step, and the bubble against (S-1)/(M+S-1). Writes
# bench/results/pipeline.txt (command lines, machine, commit, the tables).
#
#   usage: bench/pipeline.sh [BUILD_DIR]     (default: build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
out="$here/results/pipeline.txt"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpirun=(mpirun --allow-run-as-root --oversubscribe)
model=(--depth 16 --width 512 --batch 128)
# max_bytes: the one-rank (one stage) peak under policy none, 1 microbatch
one=$("${mpirun[@]}" -np 1 "$build/mg-bench-pipeline" "${model[@]}" \
    --micro 1 --schedule 1f1b --policy none --steps 1 --warmup 0 |
    awk 'NR == 2 {print $6}')
args=("${model[@]}" --micro 1,2,4,8 --schedule gpipe,1f1b
    --policy none,memory --steps 3 --warmup 1 --max-bytes "$one")
{
    echo "# bench/pipeline.sh: mpirun -np S mg-bench-pipeline ${args[*]}"
    echo "# S = 1, 2, 4; OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git -C "$root" rev-parse --short HEAD)," \
        "$(nproc --all)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# max_bytes = $one (one rank, policy none, 1 microbatch)"
    for np in 1 2 4; do
        echo
        "${mpirun[@]}" -np "$np" "$build/mg-bench-pipeline" "${args[@]}"
    done
    echo
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out"
