#!/usr/bin/env bash
# Models exported by torch.onnx.export (bench/onnx/torch_export.py) under
# each checkpoint policy with memgrad-onnx: predicted and measured pool
# peak, recompute fraction, median step time. Writes
# bench/results/onnx-torch.txt (raw output with command lines and machine)
# and bench/results/onnx-torch.csv.
#
#   usage: bash bench/onnx/torch_run.sh [BUILD_DIR] [PYTHON] [BATCH]
#          (defaults: build, python3, 16)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build}
py=${2:-python3}
batch=${3:-16}
tool=$build/memgrad-onnx
models=$build/onnx-torch-bench
out=bench/results
"$py" bench/onnx/torch_export.py "$models" "$batch" >/dev/null 2>&1
txt=$out/onnx-torch.txt
csv=$out/onnx-torch.csv
{
    echo "# bash bench/onnx/torch_run.sh $build $py $batch   ($(date -u +%Y-%m-%d))"
    echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# torch $("$py" -c 'import torch; print(torch.__version__)'), models exported in training mode, opset 17"
} >"$txt"
echo "model,batch,policy,checkpoints,predicted_peak_bytes,measured_peak_bytes,recompute_fraction,median_step_s,loss" >"$csv"
for m in resnet18 mobilenet_v2 unet gpt bert; do
    for p in none memory speed; do
        plan="$tool plan $models/$m.onnx --batch $batch --policy $p"
        cmd="$tool step $models/$m.onnx --batch $batch --policy $p --repeat 3"
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
        echo "$m,$batch,$p,$nck,$pred,$meas,$frac,$step,$loss" >>"$csv"
    done
done
column -s, -t "$csv"
