#!/usr/bin/env bash
# bench/budget_speed.sh - how long the budget policy (issue 17) takes to
# differentiate, choose and compile MLPs of 10^4 and 10^5 forward ops
# (depth 3334 and 33334), at budgets of 0.02 (multi-level recomputation),
# 0.05 and 0.3 of policy none's peak; written to
# bench/results/budget-speed.txt. The figure is each row's
# "differentiate+choose+compile" time.
#
#   usage: bench/budget_speed.sh [BUILD_DIR]     (default: build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
{
    echo "# bench/budget_speed.sh $*: $(git -C "$root" log --oneline -1 | cut -c1-60)"
    echo "# machine: $(nproc)-core CPU VM ($(uname -m)), $(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    for d in 3334 33334; do
        args="--depth $d --batch 4 --width 8 --repeat 1 --fractions 0.02,0.05,0.3"
        echo "\$ build/mg-bench budget $args"
        # shellcheck disable=SC2086
        /usr/bin/time -f "wall %e s, max RSS %M KiB" "$build/mg-bench" budget $args 2>&1
    done
} | tee "$here/results/budget-speed.txt"
