#!/usr/bin/env bash
# onnx_rss test (issue 28 item 5, for memgrad-onnx; tests/test_rss.c and
# python/tests/test_rss_bridge.py hold the C API and the bridge to the same
# rule): the resident set `memgrad-onnx step` adds over its steps (VmHWM
# reset just before the first step, less the RSS then; the caller's
# gradient buffers already touched) stays within the pool's reservation,
# which equals the plan's prediction, plus RSS_OVERHEAD, a fixed allowance
# for what is not the pool's: the kernels' lazy state (oneDNN's JIT
# primitives, OpenBLAS's buffers, OpenMP's threads), malloc's own. About
# 5 MiB of it was seen at every batch on the test ResNet (x86-64, oneDNN
# 2.6), so the test takes a batch whose pool is larger than that.
# Skipped (77) without /proc/self/clear_refs and under AddressSanitizer.
#
# usage: run.sh <memgrad-onnx> <tests/data>
set -euo pipefail
tool=$1
data=$2
RSS_OVERHEAD=$((8 << 20))
[ -w /proc/self/clear_refs ] || { echo "no /proc/self/clear_refs"; exit 77; }
# (ldd's whole output first: under pipefail, grep -q quitting at the first
# match can kill ldd with SIGPIPE and fail the test instead of skipping it)
libs=$(ldd "$tool" 2>/dev/null || true)
if grep -q libasan <<<"$libs"; then
    echo "AddressSanitizer build: RSS means nothing"
    exit 77
fi
for p in none memory; do
    out=$("$tool" step "$data/resnet.onnx" --batch 2048 --policy "$p" \
        --repeat 2)
    echo "$out"
    read -r grown reserved < <(sed -n \
        's/^rss increase over the steps \([0-9]*\) bytes, pool reserved \([0-9]*\) bytes$/\1 \2/p' \
        <<<"$out")
    predicted=$(sed -n \
        's/^pool peak measured [0-9]* bytes, predicted \([0-9]*\) bytes$/\1/p' \
        <<<"$out")
    if [ -z "$grown" ] || [ -z "$predicted" ]; then
        echo "FAIL $p: no rss or pool line"
        exit 1
    fi
    # the pool reserves what the plan said it would (its arena, at least
    # the predicted peak, more where the placement fragments, plus the
    # outputs' blocks), and that is larger than the allowance, so the
    # test measures the pool
    predicted_res=$(sed -n \
        's/^arena [0-9]* bytes (most live at once [0-9]*), pool reservation predicted \([0-9]*\) bytes$/\1/p' \
        <<<"$out")
    [ "$reserved" = "$predicted_res" ] || {
        echo "FAIL $p: pool reserved $reserved bytes, the plan predicted ${predicted_res:-nothing}"
        exit 1
    }
    [ "$reserved" -ge "$predicted" ] || {
        echo "FAIL $p: pool reserved $reserved bytes, below the predicted peak $predicted"
        exit 1
    }
    [ "$reserved" -gt "$RSS_OVERHEAD" ] || {
        echo "FAIL $p: pool of $reserved bytes no larger than the allowance"
        exit 1
    }
    # RSS was measured at all: the arena's pages are resident
    [ "$grown" -ge $((reserved / 2)) ] || {
        echo "FAIL $p: RSS grew by $grown bytes, less than half the pool's $reserved"
        exit 1
    }
    [ "$grown" -le $((reserved + RSS_OVERHEAD)) ] || {
        echo "FAIL $p: RSS grew by $grown bytes over the steps; the pool reserved $reserved (+ $RSS_OVERHEAD allowed)"
        exit 1
    }
    echo "ok $p: RSS +$grown bytes, pool $reserved (+ $RSS_OVERHEAD allowed)"
done
