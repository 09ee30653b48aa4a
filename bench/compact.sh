#!/usr/bin/env bash
# bench/compact.sh - compaction alone (issue 29 item 2): one training step
# under policy none with and without mg_checkpoints.compact, on memgrad's
# ResNet at 32 blocks and U-Net (mg-bench step, default sizes but batch 8
# for the U-Net), and on torchvision's resnet50 through memgrad.torch
# (bench/compact_torch.py, batch 2, 224 x 224). For each: the predicted
# and measured pool peak, and whether every gradient is the same bits
# (mg-bench's --save-grads files compared with cmp; the bridge compares
# the torch tensors). Writes bench/results/compact.txt.
#
#   usage: bench/compact.sh [BUILD_DIR]     (default: build)
# The bridge needs PyTorch and torchvision, and libmemgrad: MEMGRAD_LIBRARY
# (default: BUILD_DIR/libmemgrad_shared_check.so) and python/ on PYTHONPATH.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
out="$here/results/compact.txt"
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases=("resnet 32" "unet 4 --batch 8") # model depth [options]
{
    echo "# bench/compact.sh: mg-bench step --model M --depth D [--batch B] --policy none --repeat 1 --compact no|yes --save-grads F"
    echo "#                   $py bench/compact_torch.py --model resnet50 --batch 2 --image 224"
    echo "# $(date -u +%Y-%m-%d) $(git -C "$root" rev-parse --short HEAD)," \
        "$(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# peaks: the pool's, in bytes (size classes); time: one step, shared machine"
    printf '%-8s %5s %-7s %12s %12s %10s %s\n' model depth compact \
        predicted measured step_ms grads_equal
    for c in "${cases[@]}"; do
        set -- $c
        m=$1 d=$2
        shift 2
        for k in no yes; do
            kv=$("$build/mg-bench" step --model "$m" --depth "$d" "$@" \
                --policy none --repeat 1 --compact "$k" \
                --save-grads "$tmp/$m-$k.bin" 2>&1) || {
                echo "$m $k: mg-bench failed: $kv" >&2
                exit 1
            }
            get() { sed -n "s/^$1=//p" <<< "$kv"; }
            eq=-
            if [ "$k" = yes ]; then
                eq=$(cmp -s "$tmp/$m-no.bin" "$tmp/$m-yes.bin" && echo yes || echo NO)
            fi
            printf '%-8s %5s %-7s %12s %12s %10s %s\n' "$m" "$d" "$k" \
                "$(get predicted_peak_bytes)" "$(get peak_bytes)" \
                "$(get time_ms_median)" "$eq"
            [ "$k" = no ] && base=$(get peak_bytes)
            [ "$k" = yes ] && awk -v a="$(get peak_bytes)" -v b="$base" \
                'BEGIN{printf "# %s: compact / plain measured peak %.4f (saves %.2f MiB)\n", "'"$m"'", a/b, (b-a)/1048576}'
        done
    done
    echo
    MEMGRAD_LIBRARY=${MEMGRAD_LIBRARY:-$build/libmemgrad_shared_check.so} \
        PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
        "$py" "$here/compact_torch.py" --model resnet50 --batch 2 --image 224
} | tee "$out"
