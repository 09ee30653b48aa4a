#!/usr/bin/env bash
# bench/half.sh - bfloat16 and float16 on the CPU (issue 47, first part):
# each op's 16-bit forward and gradient against float64 rounded, in ulps
# (the lines tests/test_half.c prints), then bench/half_bridge.py: a
# bfloat16 MLP's gradient distance from float64 beside PyTorch's own, and
# step time and pool peaks (predicted and measured) for float32 and
# bfloat16, PyTorch eager beside memgrad. Writes bench/results/half.txt.
#
#   usage: bench/half.sh [BUILD_DIR] [SHARED_BUILD_DIR]
#          (defaults: build, build-so: a build with tests, and one with
#          BUILD_SHARED_LIBS=ON for the Python package)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build=${1:-build}
so=${2:-build-so}
case $build in /*) ;; *) build="$root/$build" ;; esac
case $so in /*) ;; *) so="$root/$so" ;; esac
cd "$root"
py=${PYTHON:-python3}
txt=bench/results/half.txt
{
    echo "# half.txt - bash bench/half.sh ${1:-build} ${2:-build-so}: bfloat16 and float16 on the CPU"
    echo "# commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src include python bench ':(exclude)bench/results' || echo ' (modified)')"
    echo "# date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# machine: $(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# 16-bit path: float32 kernels on widened copies (no avx512_bf16 or amx in /proc/cpuinfo: $(grep -o -m1 'avx512_bf16\|amx_bf16' /proc/cpuinfo || echo none))"
    echo "# python:  $("$py" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__)')"
    echo "# per op: worst |got - round16(f64)| over the tensor in ulps of its largest magnitude;"
    echo "#         the bound is the test's assertion"
    echo
    echo "\$ CK_RUN_CASE=ops ${build#"$root"/}/test_half | grep '^half:'"
    CK_RUN_CASE=ops "$build/test_half" | grep '^half:'
    echo
    echo "\$ OMP_NUM_THREADS=1 $py bench/half_bridge.py"
    OMP_NUM_THREADS=1 MEMGRAD_LIBRARY="$so/libmemgrad.so" \
        PYTHONPATH="$root/python" "$py" bench/half_bridge.py
} | tee "$txt"
