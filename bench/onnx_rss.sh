#!/usr/bin/env bash
# bench/onnx_rss.sh - issue 28's memgrad-onnx figures: the peak RSS of
# `memgrad-onnx step` on torchvision's resnet34 (1000 classes, exported by
# torch.onnx in training mode, 64x64) against 2.5 x its parameter bytes
# plus the pool's predicted peak, and the RSS of printing the usage.
#
#   bench/onnx_rss.sh [build dir, default build] [batch, default 16] \
#       > bench/results/onnx-rss.txt
set -euo pipefail
build=${1:-build}
batch=${2:-16}
tool=$build/memgrad-onnx
tmp=$(mktemp -d "${TMPDIR:-/tmp}/onnx-rss.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3 # where Debian puts torch

"$py" - "$tmp/resnet34.onnx" <<'PY' >"$tmp/params"
import sys, warnings
import torch, torchvision
warnings.filterwarnings("ignore")
torch.manual_seed(0)
m = torchvision.models.resnet34()
m.train()
torch.onnx.export(m, (torch.randn(2, 3, 64, 64),), sys.argv[1],
                  opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False, input_names=["x"],
                  output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
print(sum(p.numel() * p.element_size() for p in m.parameters()))
PY
params=$(cat "$tmp/params")

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD), 2-core AMD EPYC VM (shared with other builds)"
echo "# bench/onnx_rss.sh $build $batch; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
/usr/bin/time -f '%M' -o "$tmp/usage.rss" "$tool" >/dev/null 2>&1 || true
echo "memgrad-onnx (usage): peak RSS $(tail -1 "$tmp/usage.rss") kB"
for policy in none memory; do
    /usr/bin/time -f '%M' -o "$tmp/step.rss" "$tool" step "$tmp/resnet34.onnx" \
        --batch "$batch" --policy "$policy" --repeat 2 >"$tmp/step.txt"
    rss=$(( $(cat "$tmp/step.rss") * 1024 ))
    predicted=$(sed -n 's/^pool peak measured [0-9]* bytes, predicted \([0-9]*\) bytes$/\1/p' "$tmp/step.txt")
    limit=$(( params * 5 / 2 + predicted ))
    awk -v p="$policy" -v b="$batch" -v rss="$rss" -v par="$params" \
        -v pred="$predicted" -v lim="$limit" 'BEGIN {
        printf "resnet34 step, batch %d at 64x64, policy %s: peak RSS %.1f MB; parameters %.1f MB, predicted pool peak %.1f MB; 2.5 x parameters + predicted = %.1f MB; peak / that = %.2f\n",
            b, p, rss / 1e6, par / 1e6, pred / 1e6, lim / 1e6, rss / lim }'
    grep -E '^(loss|median step)' "$tmp/step.txt" | sed 's/^/    /'
done
