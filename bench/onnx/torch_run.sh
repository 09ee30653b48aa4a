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
source bench/onnx/row.sh
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
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include || echo ' (modified)')"
    echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# torch $("$py" -c 'import torch; print(torch.__version__)'), models exported in training mode, opset 17"
} >"$txt"
onnx_bench_header "$csv"
for m in resnet18 mobilenet_v2 unet gpt bert; do
    for p in none memory speed; do
        onnx_bench_row "$tool" "$models/$m.onnx" "$m" "$batch" "$p" "$txt" "$csv" "$models"
    done
done
column -s, -t "$csv"
