#!/usr/bin/env bash
# bench/timeline.sh - the memory timelines of issue 15 in bench/results/:
# timeline-<model>.svg (memgrad-plan --timeline: every policy, predicted
# and measured) and timeline-<model>-<policy>.csv (mg_plan_write_timeline),
# with memgrad-plan's output in timeline.txt; bench/plot draws the CSVs
# again as timeline-<model>-gnuplot.svg where gnuplot is installed.
#
#   usage: bench/timeline.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build=$1
res="$here/results"
{
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include || echo ' (modified)')"
    echo "# bench/timeline.sh; machine: $(nproc)-core CPU VM ($(uname -m)), $(date -u +%F)"
    for spec in "resnet --depth 8 --width 16 --batch 8" \
                "unet --depth 3 --width 16 --batch 8"; do
        model=${spec%% *}
        args="--model $spec --timeline $res/timeline-$model.svg --csv $res/timeline-$model"
        echo
        echo "\$ memgrad-plan ${args//$res/bench/results}"
        # shellcheck disable=SC2086
        "$build/memgrad-plan" $args
    done
} | tee "$res/timeline.txt"
# The same CSVs drawn by bench/plot (gnuplot): timeline-<model>-gnuplot.svg.
if command -v gnuplot >/dev/null; then
    bash "$here/plot" "$res"/timeline-*-*.csv
fi
