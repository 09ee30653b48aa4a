#!/usr/bin/env bash
# bench/offload/run.sh - issue 51's CPU bench: the GPT builder's step at
# 0.3x policy none's budget peak, MG_CKPT_BUDGET with recomputation only
# and with offload allowed (CPU host tier), predicted and measured step
# times and peaks (offload_gpt.c, compiled here against BUILD_DIR's
# libmemgrad.a). One thread for the steps (the copy worker is a second).
# On a CPU the host tier saves no memory anywhere: the run checks the
# planner's choice and predictions (docs/offload.md).
#
#   usage: bash bench/offload/run.sh [BUILD_DIR]   (default: build)
#
# Writes bench/results/offload-gpt.txt.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build="$root/$build" ;; esac
out="$root/bench/results/offload-gpt.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs="$(pkg-config --libs igraph openblas 2>/dev/null || echo -ligraph -lopenblas) -ldnnl -lgomp -lmvec -lm -lpthread"
# shellcheck disable=SC2086
cc -O2 -I"$root/include" "$here/offload_gpt.c" "$build/libmemgrad.a" $libs \
    -o "$tmp/offload_gpt"
args=(8 64 64 4 128 0.3 21)
# the tree's state before this run writes its results file
if [ -n "$(git -C "$root" status --porcelain)" ]; then tree="NOT CLEAN"; else tree=clean; fi
{
    echo "# bench/offload/run.sh: offload_gpt ${args[*]}"
    echo "# (LAYERS D_MODEL SEQ BATCH VOCAB FRACTION REPEAT)"
    echo "# date: $(date -u +%FT%TZ)"
    echo "# commit: $(git -C "$root" log --oneline -1)"
    echo "# tree: $tree"
    echo "# machine: $(nproc)-core CPU VM ($(uname -m)), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# env: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"
    rc=0
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$tmp/offload_gpt" "${args[@]}" 2>&1 || rc=$?
    echo "# rc=$rc; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out"
