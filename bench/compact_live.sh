#!/usr/bin/env bash
# bench/compact_live.sh - why compaction alone leaves the ResNet's peak where
# it is (issue 29 item 2): mg-bench live lists every tensor live at the
# predicted peak of one training step under policy none, with and without
# mg_checkpoints.compact, and the first step still to read each one; the
# U-Net (depth 4, batch 8, as in bench/compact.sh) beside it, where
# compaction does lower the peak. Plans only, nothing runs: the figures are
# the pool's predicted bytes. Writes bench/results/compact-live.txt.
#
#   usage: bench/compact_live.sh [BUILD_DIR]     (default: build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
out="$here/results/compact-live.txt"
{
    echo "# bench/compact_live.sh: mg-bench live --model M --depth D [--batch B] --policy none --compact no|yes"
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src include bench ':!bench/results' || echo ' (modified)')," \
        "$(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    for c in "resnet 32" "unet 4 --batch 8"; do
        set -- $c
        m=$1 d=$2
        shift 2
        for k in no yes; do
            echo
            echo "\$ mg-bench live --model $m --depth $d $* --policy none --compact $k"
            "$build/mg-bench" live --model "$m" --depth "$d" "$@" --policy none \
                --compact "$k" >"$out.part"
            cat "$out.part"
            echo "# by op and next reader: count, op, kind, next reader op and input slot, bytes"
            awk '/^%/ && $6 >= 0 { k = $3 " " $4 " -> " $7 " input " $10; n[k]++; b[k] += $5 }
                 END { for (k in n) printf "#   %4d  %s  %d\n", n[k], k, b[k] }' \
                "$out.part" | sort -k2,2nr
        done
    done
} >"$out"
rm -f "$out.part"
grep '^# .*: [0-9]* steps\|^# live bytes' "$out"
