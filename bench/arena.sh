#!/usr/bin/env bash
# bench/arena.sh - the planned arena (issue 28) on the bench models: for
# each model and policy, one `mg-bench step` (gradients bound to caller
# memory, as in training), and from its key=value lines the arena's size
# against the most of its bytes live at once, and what the pool reserved
# after the first step against what the plan predicted. Writes
# bench/results/arena.txt (command lines, machine, commit, the table).
#
#   usage: bench/arena.sh [BUILD_DIR]     (default: build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
out="$here/results/arena.txt"
models=(mlp:64 resnet:16 unet:4 transformer:8) # model:depth
policies=(none memory speed)
{
    echo "# bench/arena.sh: mg-bench step --model M --depth D --policy P --batch 8 --repeat 2"
    echo "# $(date -u +%Y-%m-%d) $(git -C "$root" rev-parse --short HEAD)," \
        "$(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    printf '%-12s %5s %-7s %12s %12s %7s %12s %12s %s\n' model depth \
        policy arena_bytes live_peak ratio predicted_rsv reserved equal
    for md in "${models[@]}"; do
        m=${md%:*} d=${md#*:}
        for p in "${policies[@]}"; do
            kv=$("$build/mg-bench" step --model "$m" --depth "$d" \
                --policy "$p" --batch 8 --repeat 2 2>&1) || {
                echo "$m $p: mg-bench failed: $kv" >&2
                exit 1
            }
            get() { sed -n "s/^$1=//p" <<< "$kv"; }
            a=$(get arena_bytes) l=$(get arena_live_peak_bytes)
            pr=$(get predicted_reserved_bytes) r=$(get pool_reserved_bytes)
            printf '%-12s %5s %-7s %12s %12s %7s %12s %12s %s\n' "$m" "$d" \
                "$p" "$a" \
                "$l" "$(awk -v a="$a" -v l="$l" 'BEGIN{printf "%.4f", a/l}')" \
                "$pr" "$r" "$([ "$pr" = "$r" ] && echo yes || echo NO)"
        done
    done
} | tee "$out"
