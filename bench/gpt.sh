#!/usr/bin/env bash
# bench/gpt.sh - issue 30's GPT beside PyTorch: 6 layers, d_model 256, 8
# heads, seq 512, batch 8, f32, on 1 and 2 threads (bench/compare_torch.py
# --model gpt: plain PyTorch, PyTorch checkpointing each block, memgrad
# under none and memory; time, activation bytes, RSS and gradient checks).
# Writes bench/results/gpt-cpu.txt (and .csv) with the command, commit,
# date and machine.   usage: bash bench/gpt.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
repeat=${2:-3}
out=bench/results/gpt-cpu.txt
csv=bench/results/gpt-cpu.csv
py=/usr/bin/python3 # Debian's, with python3-torch
{
    echo "# bench/gpt.sh $build $repeat: GPT beside PyTorch (6 layers, d_model 256, 8 heads, seq 512, batch 8)"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include || echo ' (modified)')"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    append=""
    for t in 1 2; do
        cmd=("$py" bench/compare_torch.py --mg-bench "$build/mg-bench" --model gpt
             --depths 6 --batch 8 --width 256 --repeat "$repeat" --threads "$t"
             --csv "$csv" $append)
        echo "\$ ${cmd[*]}"
        "${cmd[@]}"
        append=--append
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out.tmp"
mv "$out.tmp" "$out"
cat "$out"
