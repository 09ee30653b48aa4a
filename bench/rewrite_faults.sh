#!/usr/bin/env bash
# bench/rewrite_faults.sh - page faults of `mg-bench rewrite` runs (issue
# 32): most of rewriting and planning a large graph was the kernel paging
# in fresh memory, so the bytes a run touches are measured apart from its
# time, with `perf stat -e page-faults`, which load does not move. One
# line per binary and size (graph building included, one run each).
#   usage: bash bench/rewrite_faults.sh MG_BENCH [MG_BENCH ...]
set -euo pipefail
[ "$#" -gt 0 ] || { echo "usage: $0 MG_BENCH [MG_BENCH ...]" >&2; exit 2; }
command -v perf >/dev/null || { echo "$0: needs perf (linux-perf)" >&2; exit 2; }
echo "# bash bench/rewrite_faults.sh $*"
echo "# commit: $(git -C "$(dirname "$0")/.." rev-parse HEAD); date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(uname -r)"
printf '%-40s %-9s %8s %12s\n' binary shape ops page_faults
for bin in "$@"; do
    for shape in chain residual; do
        for ops in 100000 1000000; do
            f=$(perf stat -x, -e page-faults "$bin" rewrite --ops "$ops" \
                --shape "$shape" --repeat 1 2>&1 >/dev/null |
                awk -F, '/page-faults/ {print $1}')
            printf '%-40s %-9s %8s %12s\n' "$bin" "$shape" "$ops" "$f"
        done
    done
done
