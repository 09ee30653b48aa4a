#!/usr/bin/env bash
# bench/rewrite_cost.sh - what mg-bench rewrite costs, in figures a loaded
# machine does not move (issue 32): the instructions mg_gradients and
# mg_plan_compile execute (valgrind's callgrind, inclusive) and the page
# faults of the whole run (perf stat; graph building included), for one
# run of each shape at each op count. Compare two builds in the same
# minute with it; wall and CPU times come from mg-bench rewrite itself.
#
#   bash bench/rewrite_cost.sh BUILD_DIR [OPS,...]   (default 10000,100000)
set -euo pipefail
build=${1:?usage: rewrite_cost.sh BUILD_DIR [OPS,...]}
ops_list=${2:-10000,100000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# bench/rewrite_cost.sh $*"
echo "# build $build; commit $(git -C "$build/.." rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%Y-%m-%dT%H:%MZ)"
printf "%-9s %9s %16s %16s %12s\n" shape ops grad_instr plan_instr page_faults
for shape in chain residual; do
    for ops in ${ops_list//,/ }; do
        valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
            --toggle-collect=mg_gradients --toggle-collect=mg_plan_compile \
            "$build/mg-bench" rewrite --ops "$ops" --shape "$shape" \
            --repeat 1 > /dev/null 2>&1
        counts=$(callgrind_annotate --inclusive=yes "$tmp/cg.out" 2> /dev/null |
            awk '/:mg_gradients |:mg_plan_compile / {
                n = $1; gsub(",", "", n)
                if ($0 ~ /mg_gradients/) g = n; else p = n }
                END { print g, p }')
        faults=$(perf stat -x, -e page-faults "$build/mg-bench" rewrite \
            --ops "$ops" --shape "$shape" --repeat 1 2>&1 > /dev/null |
            awk -F, '/page-faults/ {print $1}')
        read -r g p <<< "$counts"
        printf "%-9s %9s %16s %16s %12s\n" "$shape" "$ops" "$g" "$p" "$faults"
    done
done
