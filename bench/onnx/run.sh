#!/usr/bin/env bash
# ONNX models under each checkpoint policy with memgrad-onnx (issue 12):
# predicted and measured pool peak, recompute fraction and median step time
# beside policy none. Writes bench/results/onnx.txt (the raw output, with
# the command lines and the machine) and bench/results/onnx.csv.
#
#   usage: bash bench/onnx/run.sh [BUILD_DIR]     (default build)
# needs: python3 with the onnx and numpy packages (the models are generated
# by bench/onnx/make_models.py into BUILD_DIR/onnx-bench).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build}
tool=$build/memgrad-onnx
models=$build/onnx-bench
out=bench/results
python3 bench/onnx/make_models.py "$models" >/dev/null
txt=$out/onnx.txt
csv=$out/onnx.csv
{
    echo "# bash bench/onnx/run.sh $build   ($(date -u +%Y-%m-%d))"
    echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
} >"$txt"
echo "model,batch,policy,checkpoints,predicted_peak_bytes,measured_peak_bytes,recompute_fraction,median_step_s,loss" >"$csv"
for spec in resnet18:16 unet:8 gpt:8; do
    m=${spec%%:*}
    n=${spec##*:}
    for p in none memory speed; do
        cmd="$tool step $models/$m.onnx --batch $n --policy $p --repeat 3"
        plan="$tool plan $models/$m.onnx --batch $n --policy $p"
        echo "\$ $plan" >>"$txt"
        $plan >"$models/plan.txt"
        cat "$models/plan.txt" >>"$txt"
        echo "\$ $cmd" >>"$txt"
        $cmd >"$models/step.txt"
        cat "$models/step.txt" >>"$txt"
        nck=$(sed -n 's/^  checkpoints: \([0-9]*\).*/\1/p' "$models/plan.txt")
        frac=$(sed -n 's/^  recompute fraction: \([0-9.]*\).*/\1/p' "$models/plan.txt")
        loss=$(sed -n 's/^loss //p' "$models/step.txt")
        step=$(sed -n 's/^median step \([0-9.]*\) s.*/\1/p' "$models/step.txt")
        meas=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\1/p' "$models/step.txt")
        pred=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\2/p' "$models/step.txt")
        echo "$m,$n,$p,$nck,$pred,$meas,$frac,$step,$loss" >>"$csv"
    done
done
column -s, -t "$csv"
