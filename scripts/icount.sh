#!/usr/bin/env bash
# scripts/icount.sh - a regression guard that timing noise cannot fool
# (issue 32): the instructions mg_gradients (differentiate and rewrite,
# policy memory) and mg_plan_compile execute on 10^4-op graphs, counted by
# valgrind's callgrind, against bench/results/icount-baseline.txt. Fails
# when a count grows by more than 10%; a change meant to cost more reruns
# this with --update in the same commit and says why.
#
#   bash scripts/icount.sh BUILD_DIR            # compare
#   bash scripts/icount.sh BUILD_DIR --update   # rewrite the baseline
#
# Instruction counts repeat exactly for the same binary and inputs, and
# change little across x86 machines (glibc's memcpy and memset variants
# differ by CPU); a training step is left out, as its BLAS and oneDNN
# kernels differ by CPU far more.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:?usage: icount.sh BUILD_DIR [--update]}
baseline=bench/results/icount-baseline.txt
limit=1.10

command -v valgrind > /dev/null || {
    echo "icount.sh: valgrind not found (Debian: valgrind)" >&2
    exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

measure() { # shape -> lines "shape function count"
    valgrind --tool=callgrind --callgrind-out-file="$tmp/$1.out" \
        --toggle-collect=mg_gradients --toggle-collect=mg_plan_compile \
        "$build/mg-bench" rewrite --ops 10000 --shape "$1" --repeat 1 \
        > /dev/null 2>&1
    callgrind_annotate --inclusive=yes "$tmp/$1.out" 2> /dev/null |
        awk -v s="$1" '/:mg_gradients |:mg_plan_compile / {
            n = $1; gsub(",", "", n)
            for (i = 2; i <= NF; i++) if ($i ~ /:mg_/) f = $i
            sub(/.*:/, "", f); print s, f, n }'
}

now=$( { measure chain; measure residual; } )
if [ "${2:-}" = --update ]; then
    {
        echo "# scripts/icount.sh: instructions (callgrind, inclusive) of mg-bench"
        echo "# rewrite --ops 10000 --repeat 1, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD),"
        echo "# $(uname -m), $(gcc --version | head -1), build $build"
        echo "$now"
    } > "$baseline"
    cat "$baseline"
    exit 0
fi
status=0
while read -r shape fn count; do
    base=$(awk -v s="$shape" -v f="$fn" '$1 == s && $2 == f {print $3}' "$baseline")
    if [ -z "$base" ]; then
        echo "icount: no baseline for $shape $fn" >&2
        status=1
        continue
    fi
    ratio=$(awk -v a="$count" -v b="$base" 'BEGIN {printf "%.3f", a / b}')
    verdict=ok
    if awk -v r="$ratio" -v l="$limit" 'BEGIN {exit !(r > l)}'; then
        verdict="FAIL (more than +10%)"
        status=1
    fi
    echo "icount: $shape $fn $count instructions, baseline $base, x$ratio $verdict"
done <<< "$now"
exit "$status"
