#!/usr/bin/env bash
# A GPT that arrives through the ONNX importer beside memgrad's own GPT
# builder of the same shape (issue 46, "views, not copies"). The imported
# model is bench/onnx/gpt_export.py's (torch.onnx.export, training mode:
# one qkv Linear split three ways, heads by view/transpose, masked_fill of
# a triu buffer, tied head), through `memgrad-onnx step`, twice:
#   exact  nn.GELU's default (erf) at opset 17, which exports the erf
#          formula (Div, Erf, Add, Mul, Mul);
#   tanh   GELU's tanh form at opset 20, one Gelu node: mg_gelu, the
#          builder's, so the two graphs differ only in how the model
#          arrived (layout ops, one qkv product split, the mask).
# The builder is `mg-bench step --model gpt` (mg_model_gpt: q, k and v
# Linears, the fused causal attention, mg_gelu, tied head). All at 4
# layers, d 256, 8 heads, T 256, batch 8, vocabulary 256, policy none, one
# thread. The three run in turn, ROUNDS times, each a fresh process timing
# 3 steps after a warm-up one; a row per round has the medians and the
# ratios to the builder's of the same round, so that load from other
# processes falls on all alike, and the last lines the median ratios. On a
# loaded machine a step's wall time includes waiting for a core, so the
# mean CPU time of the process over the timed steps (memgrad-onnx's "mean
# step cpu", mg-bench's cpu_ms_mean: CLOCK_PROCESS_CPUTIME_ID around each
# mg_exec_run) and its ratio to the builder's are in the row too. The
# last exact run's profile table (mg_profiler_print, time by op kind and
# phase) closes the file. Writes bench/results/gpt-import-vs-builder.txt.
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
"$py" bench/onnx/gpt_export.py "$work/gpt-exact.onnx" $layers $d $seq $batch $vocab exact 17
"$py" bench/onnx/gpt_export.py "$work/gpt-tanh.onnx" $layers $d $seq $batch $vocab tanh 20
opts="--batch $batch --policy none --repeat 3"
exact="$build/memgrad-onnx step $work/gpt-exact.onnx $opts --profile $work/profile.txt"
tanh="$build/memgrad-onnx step $work/gpt-tanh.onnx $opts"
bld="$build/mg-bench step --model gpt --depth $layers --batch $batch --width $d --seq $seq --policy none --repeat 3"
{
    echo "# bash bench/onnx/gpt_vs_builder.sh $build $py $rounds   ($(date -u +%Y-%m-%d))"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include tools bench ':!bench/results' || echo ' (modified)')"
    echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# torch $("$py" -c 'import torch; print(torch.__version__)') exported the models; one thread (OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1)"
    echo "# exact:   \$ $exact   (gpt_export.py ... exact 17)"
    echo "# tanh:    \$ $tanh   (gpt_export.py ... tanh 20)"
    echo "# builder: \$ $bld"
    echo "# shape: $layers layers, d $d, $((d / 32)) heads, T $seq, batch $batch, vocabulary $vocab; policy none"
    echo "# times: each run's median of 3 steps (ms); ratios to the builder's time of the same round"
    echo "# peaks: the pool's measured and predicted peak (bytes); they must be equal"
    echo "# cpu: the process's mean CPU ms per timed step; cpu ratios to the builder's"
    printf '%-5s %9s %9s %9s %7s %7s %9s %9s %9s %8s %8s %10s %10s %10s %10s %10s %10s\n' round exact_ms \
        tanh_ms bld_ms exact/b tanh/b ex_cpu_ms ta_cpu_ms bl_cpu_ms ex/b_cpu ta/b_cpu ex_meas ex_pred tanh_meas \
        tanh_pred bld_meas bld_pred
} >"$out"
onnx_row() { # FILE: median ms, measured, predicted
    local s m p
    s=$(sed -n 's/^median step \([0-9.]*\) s.*/\1/p' "$1")
    m=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\1/p' "$1")
    p=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\2/p' "$1")
    echo "$(awk -v s="$s" 'BEGIN { printf "%.1f", s * 1000 }') $m $p"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rex=() rta=() cex=() cta=()
for r in $(seq 1 "$rounds"); do
    $exact >"$work/exact.txt"
    $tanh >"$work/tanh.txt"
    $bld >"$work/bld.txt" 2>/dev/null
    ec=$(sed -n 's/^mean step cpu \([0-9.]*\) s/\1/p' "$work/exact.txt" | awk '{ printf "%.1f", $1 * 1000 }')
    tc=$(sed -n 's/^mean step cpu \([0-9.]*\) s/\1/p' "$work/tanh.txt" | awk '{ printf "%.1f", $1 * 1000 }')
    bc=$(sed -n 's/^cpu_ms_mean=//p' "$work/bld.txt" | awk '{ printf "%.1f", $1 }')
    read -r et em ep < <(onnx_row "$work/exact.txt")
    read -r tt tm tp < <(onnx_row "$work/tanh.txt")
    bt=$(sed -n 's/^time_ms_median=//p' "$work/bld.txt")
    bm=$(sed -n 's/^peak_bytes=//p' "$work/bld.txt")
    bp=$(sed -n 's/^predicted_peak_bytes=//p' "$work/bld.txt")
    re=$(awk -v a="$et" -v b="$bt" 'BEGIN { printf "%.3f", a / b }')
    rt=$(awk -v a="$tt" -v b="$bt" 'BEGIN { printf "%.3f", a / b }')
    rce=$(awk -v a="$ec" -v b="$bc" 'BEGIN { printf "%.3f", a / b }')
    rct=$(awk -v a="$tc" -v b="$bc" 'BEGIN { printf "%.3f", a / b }')
    rex+=("$re") rta+=("$rt") cex+=("$rce") cta+=("$rct")
    printf '%-5s %9s %9s %9.1f %7s %7s %9s %9s %9s %8s %8s %10s %10s %10s %10s %10s %10s\n' "$r" "$et" \
        "$tt" "$bt" "$re" "$rt" "$ec" "$tc" "$bc" "$rce" "$rct" "$em" "$ep" "$tm" "$tp" "$bm" "$bp" >>"$out"
done
{
    echo "median ratio exact / builder: $(printf '%s\n' "${rex[@]}" | median) over $rounds rounds"
    echo "median ratio tanh / builder: $(printf '%s\n' "${rta[@]}" | median) over $rounds rounds"
    echo "median cpu ratio exact / builder: $(printf '%s\n' "${cex[@]}" | median) over $rounds rounds"
    echo "median cpu ratio tanh / builder: $(printf '%s\n' "${cta[@]}" | median) over $rounds rounds"
    echo "# the last exact run's profile (the steps after its warm-up):"
    sed 's/^/# /' "$work/profile.txt"
} >>"$out"
cat "$out"
