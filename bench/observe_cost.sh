#!/usr/bin/env bash
# bench/observe_cost.sh - what observers cost (issue 15), written to
# bench/results/observe-cost.txt:
#   1. mg-bench observe: a run with no observer, with one whose callbacks
#      are all NULL, and with one that counts every callback, interleaved;
#   2. with no observer attached, this tree's mg-bench step against one
#      built from a commit without observers (BASE_BENCH, optional),
#      alternated, to show that the hook costs nothing when unused.
#
#   usage: bench/observe_cost.sh BUILD_DIR [BASE_BENCH]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build=$1
base=${2:-}
out="$here/results/observe-cost.txt"
bench="$build/mg-bench"
{
    echo "# bench/observe_cost.sh $*"
    echo "# machine: $(nproc)-core CPU VM ($(uname -m)), $(date -u +%F)"
    for args in "--model mlp --depth 64 --width 16 --batch 4 --repeat 200" \
                "--model mlp --depth 64 --width 256 --batch 32 --repeat 50"; do
        echo
        echo "\$ mg-bench observe $args"
        # shellcheck disable=SC2086
        "$bench" observe $args
    done
    if [ -n "$base" ]; then
        args="--model mlp --depth 64 --width 16 --batch 4 --policy memory --repeat 200"
        echo
        echo "# no observer attached: mg-bench step $args, 5 alternations"
        echo "# (time_ms_median of each process; base = $base)"
        for i in 1 2 3 4 5; do
            # shellcheck disable=SC2086
            b=$("$base" step $args | sed -n 's/^time_ms_median=//p')
            # shellcheck disable=SC2086
            t=$("$bench" step $args | sed -n 's/^time_ms_median=//p')
            echo "base=$b this=$t"
        done
    fi
} | tee "$out"
