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
source bench/onnx/row.sh
build=${1:-build}
tool=$build/memgrad-onnx
models=$build/onnx-bench
out=bench/results
python3 bench/onnx/make_models.py "$models" >/dev/null
txt=$out/onnx.txt
csv=$out/onnx.csv
{
    echo "# bash bench/onnx/run.sh $build   ($(date -u +%Y-%m-%d))"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include || echo ' (modified)')"
    echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
} >"$txt"
onnx_bench_header "$csv"
for spec in resnet18:16 unet:8 gpt:8; do
    m=${spec%%:*}
    n=${spec##*:}
    for p in none memory speed; do
        onnx_bench_row "$tool" "$models/$m.onnx" "$m" "$n" "$p" "$txt" "$csv" "$models"
    done
done
column -s, -t "$csv"
