#!/usr/bin/env bash
# A GPT that arrives through the ONNX importer beside memgrad's own GPT
# builder of the same shape (issue 46, "views, not copies"): the model of
# bench/onnx/gpt_export.py (torch.onnx.export, training mode, opset 17:
# one qkv Linear split three ways, heads by view/transpose, masked_fill of
# a triu buffer, exact GELU, tied head) through `memgrad-onnx step`, and
# `mg-bench step --model gpt` (mg_model_gpt: q, k and v Linears, the fused
# causal attention, tanh GELU, tied head) at 4 layers, d 256, 8 heads,
# T 256, batch 8, vocabulary 256, policy none, one thread. The two run in
# turn, ROUNDS times (A B A B ...), each a fresh process timing 3 steps
# after a warm-up one; a row per round has both medians and their ratio,
# so that load from other processes falls on both alike, and the last
# line the median of the ratios. With --profile, each memgrad-onnx run's
# profile table (time by op kind and phase) goes to the raw log too.
# Writes bench/results/gpt-import-vs-builder.txt.
#
#   usage: bash bench/onnx/gpt_vs_builder.sh [BUILD_DIR] [PYTHON] [ROUNDS]
#          (defaults: build, python3, 5; BUILD_DIR has memgrad-onnx and
#          mg-bench, so configure it with -DMG_BUILD_BENCH=ON)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build}
py=${2:-python3}
rounds=${3:-5}
layers=4 d=256 seq=256 batch=8 vocab=256
work=$build/onnx-gpt-vs-builder
mkdir -p "$work"
out=bench/results/gpt-import-vs-builder.txt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$py" bench/onnx/gpt_export.py "$work/gpt.onnx" $layers $d $seq $batch $vocab
imp="$build/memgrad-onnx step $work/gpt.onnx --batch $batch --policy none --repeat 3 --profile $work/profile.txt"
bld="$build/mg-bench step --model gpt --depth $layers --batch $batch --width $d --seq $seq --policy none --repeat 3"
{
    echo "# bash bench/onnx/gpt_vs_builder.sh $build $py $rounds   ($(date -u +%Y-%m-%d))"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include tools bench || echo ' (modified)')"
    echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# torch $("$py" -c 'import torch; print(torch.__version__)') exported the model; one thread (OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1)"
    echo "# imported: \$ $imp"
    echo "# builder:  \$ $bld"
    echo "# shape: $layers layers, d $d, $((d / 32)) heads, T $seq, batch $batch, vocabulary $vocab; policy none"
    echo "# times: each run's median of 3 steps (ms); ratio = imported / builder, same round"
    echo "# peaks: the pool's measured and predicted peak (bytes)"
    printf '%-6s %12s %12s %8s %12s %12s %12s %12s\n' round import_ms builder_ms ratio \
        imp_measured imp_predicted bld_measured bld_predicted
} >"$out"
ratios=()
for r in $(seq 1 "$rounds"); do
    $imp >"$work/imp.txt"
    $bld >"$work/bld.txt" 2>/dev/null
    it=$(sed -n 's/^median step \([0-9.]*\) s.*/\1/p' "$work/imp.txt")
    it=$(awk -v s="$it" 'BEGIN { printf "%.1f", s * 1000 }')
    im=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\1/p' "$work/imp.txt")
    ip=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\2/p' "$work/imp.txt")
    bt=$(sed -n 's/^time_ms_median=//p' "$work/bld.txt")
    bm=$(sed -n 's/^peak_bytes=//p' "$work/bld.txt")
    bp=$(sed -n 's/^predicted_peak_bytes=//p' "$work/bld.txt")
    ratio=$(awk -v a="$it" -v b="$bt" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    printf '%-6s %12s %12.1f %8s %12s %12s %12s %12s\n' "$r" "$it" "$bt" "$ratio" \
        "$im" "$ip" "$bm" "$bp" >>"$out"
done
med=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
echo "median ratio imported / builder: $med over $rounds rounds" >>"$out"
{
    echo "# the last imported run's profile (steps after its warm-up):"
    sed 's/^/# /' "$work/profile.txt"
} >>"$out"
cat "$out"
