#!/usr/bin/env bash
# bench/run.sh - reproduce bench/results/ (issue 6): build mg-bench in
# Release, then run the depth sweep and its plot, the rewrite timings and
# the PyTorch comparison, writing CSVs, tables and logs to bench/results/.
#
#   usage: bash bench/run.sh [all|machine|depth|rewrite|torch ...]   (default all)
#
# env: MG_BUILD_DIR (default build-bench), MG_CMAKE_ARGS (extra cmake
#      arguments, e.g. -DMG_WERROR=OFF), OPENBLAS_CORETYPE (see below),
#      DEPTH_REPEAT (7), TORCH_REPEAT (5), TORCH_THREADS ("1 2"),
#      TORCH_DEPTHS (MLP: 64,256), TORCH_RESNET_DEPTHS (32,128),
#      TORCH_RESNET_BATCH (16), TORCH_WAIT_POLICY (passive, above 1 thread).
#
# The torch part writes the ResNet's and the MLP's rows (column `model`) at
# each thread count to torch-cpu.csv, their tables to torch-cpu.txt.
#
# OpenBLAS: Debian 12's OpenBLAS 0.3.21 does not recognise some newer CPUs
# and falls back to its SSE3 "Prescott" kernels (4.5x slower sgemm on the
# machine the results were taken on). When it reports Prescott on a CPU
# with AVX-512 (or AVX2), this script sets OPENBLAS_CORETYPE=SkylakeX (or
# Haswell) for every run, memgrad's and PyTorch's alike, and records it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

parts=("$@")
[ "${#parts[@]}" -gt 0 ] || parts=(all)
want() { local p; for p in "${parts[@]}"; do [ "$p" = all ] || [ "$p" = "$1" ] && return 0; done; return 1; }

build=${MG_BUILD_DIR:-build-bench}
res=bench/results
mkdir -p "$res"

bash bench/setup.sh
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_BUILD_TESTS=OFF \
    -DMG_BUILD_EXAMPLES=OFF ${MG_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)" --target mg-bench >/dev/null
bench="$build/mg-bench"

core=$("$bench" step --depth 1 --batch 1 --width 1 --repeat 1 | sed -n 's/^blas=OpenBLAS core \([^,]*\),.*/\1/p')
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$core" = Prescott ]; then
    if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
    fi
fi
echo "OpenBLAS detected core: $core; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"

run() { # print the command line, then run it
    echo "+ $*" >&2
    "$@"
}

if want machine; then
    # Ask git before the redirection below empties machine.txt, a tracked
    # file, or every run would call itself dirty.
    commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "commit: $commit"
        echo "uname: $(uname -srm)"
        echo "load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "OpenBLAS: detected core $core; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
        echo "torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
        echo
        echo "\$ lscpu"; lscpu
        echo
        echo "\$ free -h"; free -h
    } > "$res/machine.txt"
    echo "wrote $res/machine.txt"
fi

if want depth; then
    run "$bench" depth --model mlp --depths 8,16,32,64,128,256,512,1024 \
        --policy none,memory,speed --repeat "${DEPTH_REPEAT:-7}" \
        --csv "$res/depth-mlp.csv" | tee "$res/depth-mlp.txt"
    run bench/plot "$res/depth-mlp.csv"
fi

if want rewrite; then
    {
        echo "# bash bench/run.sh rewrite: $bench rewrite --ops 10000,100000,1000000 --shape chain,residual --repeat 5 --csv $res/rewrite.csv"
        echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include || echo ' (modified)'), Release build ($build)"
        echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
        echo "# cpu_* (CLOCK_THREAD_CPUTIME_ID, the one thread that does it all) are what one core spent; *_ms wall"
    } > "$res/rewrite.txt"
    run "$bench" rewrite --ops 10000,100000,1000000 --shape chain,residual \
        --repeat 5 --csv "$res/rewrite.csv" 2>/dev/null | tee -a "$res/rewrite.txt"
fi

if want torch; then
    # Issue 14: one and two threads; the MLP and the ResNet at 32 and 128
    # blocks. Above one thread both sides run with OMP_WAIT_POLICY=passive
    # (TORCH_WAIT_POLICY): with spinning workers PyTorch's step collapsed
    # on the shared 2-core machine (bench/results/README.md).
    {
        echo "# bash bench/run.sh ... torch: bench/compare_torch.py, the lines below"
        echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include || echo ' (modified)')"
        echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    } > "$res/torch-cpu.txt"
    torch_run() { # the command line into torch-cpu.txt, then its table
        echo "\$ $*" >> "$res/torch-cpu.txt"
        run "$@" | tee -a "$res/torch-cpu.txt"
    }
    append=()
    for t in ${TORCH_THREADS:-1 2}; do
        wait_env=()
        [ "$t" -gt 1 ] && wait_env=(env "OMP_WAIT_POLICY=${TORCH_WAIT_POLICY:-passive}")
        torch_run "${wait_env[@]}" /usr/bin/python3 bench/compare_torch.py --mg-bench "$bench" \
            --model resnet --depths "${TORCH_RESNET_DEPTHS:-32,128}" \
            --batch "${TORCH_RESNET_BATCH:-16}" --threads "$t" \
            --repeat "${TORCH_REPEAT:-5}" --csv "$res/torch-cpu.csv" \
            "${append[@]}"
        append=(--append)
        torch_run "${wait_env[@]}" /usr/bin/python3 bench/compare_torch.py --mg-bench "$bench" \
            --model mlp --depths "${TORCH_DEPTHS:-64,256}" --threads "$t" \
            --repeat "${TORCH_REPEAT:-5}" --csv "$res/torch-cpu.csv" \
            --append
    done
fi
