#!/usr/bin/env bash
# bench/compact_budget.sh - the budget policy with and without compaction
# at the same budgets (issue 29 item 2: the DP chooses among keeping,
# recomputing and keeping compact): mg-bench budget --plan-only yes, which
# plans and runs nothing, so the rows are deterministic. The MLP with
# dropout 0.1 after each relu (its relu outputs are read backward only as
# sign bits), the ResNet at 32 blocks and the U-Net at 4 levels. Writes
# bench/results/compact-budget.txt and compact-budget.csv (the MLP's rows,
# which scripts/check-figures.sh plans again: the MLP has no convolution
# workspace, whose size depends on the CPU).
#
#   usage: bench/compact_budget.sh [BUILD_DIR]     (default: build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
cd "$root"
txt=bench/results/compact-budget.txt
csv=bench/results/compact-budget.csv
fr=0.05,0.1,0.15,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0
cases=("--model mlp --depth 256 --dropout 0.1 --fractions $fr --csv $csv"
    "--model resnet --depth 32 --batch 16 --fractions $fr"
    "--model unet --depth 4 --fractions $fr")
{
    echo "# compact-budget.txt - bash bench/compact_budget.sh: the budget policy without and with"
    echo "# compaction at the same budgets (fractions of policy none's predicted peak without it)"
    echo "# commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src include || echo ' (modified)')"
    echo "# date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# machine: $(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# columns: recompute_flops_ratio is forward passes recomputed; peaks in bytes (pool size"
    echo "#          classes, the budget's measure); empty where nothing fits the budget"
    for c in "${cases[@]}"; do
        echo
        echo "\$ ${build#"$root"/}/mg-bench budget $c --plan-only yes"
        # shellcheck disable=SC2086 # word splitting of c is meant
        "$build/mg-bench" budget $c --plan-only yes 2>&1
        [ -n "${c##*--csv*}" ] || cat "$csv"
    done
} | tee "$txt"
