#!/usr/bin/env bash
# bench/store16.sh - 16-bit storage of saved activations (issue 29 item 2,
# mg_checkpoints.store16, off by default): for memgrad's MLP, ResNet and
# transformer, one training step under policies none and memory, with and
# without --store16 yes. For each: the predicted and measured pool peak,
# and the normwise relative difference of all the gradients together from
# the exact ones (policy none without store16, which every exact policy
# equals bit for bit). Writes bench/results/store16.txt.
#
#   usage: bench/store16.sh [BUILD_DIR]     (default: build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
out="$here/results/store16.txt"
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases=("mlp 16" "resnet 32" "transformer 8") # model depth [options]
# normwise relative difference of two float32 gradient files
diff_py='import array, math, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
num = sum((x - y) ** 2 for x, y in zip(a, b))
den = sum(x * x for x in a)
print("%.3g" % math.sqrt(num / den))'
{
    echo "# bench/store16.sh: mg-bench step --model M --depth D --policy P --repeat 1 --store16 no|yes --save-grads F"
    echo "# $(date -u +%Y-%m-%d) $(git -C "$root" rev-parse HEAD)," \
        "$(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# peaks: the pool's, in bytes (size classes); grad_diff: ||g - g_exact|| / ||g_exact|| over every"
    echo "# gradient, g_exact from policy none without store16; loss: the step's, float32"
    printf '%-12s %5s %-7s %-7s %12s %12s %8s %10s %s\n' model depth policy store16 \
        predicted measured vs_plain grad_diff loss
    for c in "${cases[@]}"; do
        set -- $c
        m=$1 d=$2
        shift 2
        for p in none memory; do
            for k in no yes; do
                kv=$("$build/mg-bench" step --model "$m" --depth "$d" "$@" \
                    --policy "$p" --repeat 1 --store16 "$k" \
                    --save-grads "$tmp/$m-$p-$k.bin" 2>&1) || {
                    echo "$m $p $k: mg-bench failed: $kv" >&2
                    exit 1
                }
                get() { sed -n "s/^$1=//p" <<< "$kv"; }
                [ "$k" = no ] && plain=$(get peak_bytes)
                ratio=$(awk -v a="$(get peak_bytes)" -v b="$plain" 'BEGIN{printf "%.3f", a/b}')
                diff=$("$py" -c "$diff_py" "$tmp/$m-none-no.bin" "$tmp/$m-$p-$k.bin")
                printf '%-12s %5s %-7s %-7s %12s %12s %8s %10s %s\n' "$m" "$d" "$p" "$k" \
                    "$(get predicted_peak_bytes)" "$(get peak_bytes)" "$ratio" \
                    "$diff" "$(get loss)"
            done
        done
    done
} | tee "$out"
