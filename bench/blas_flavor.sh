#!/usr/bin/env bash
# bench/blas_flavor.sh - the step time under Debian's two OpenBLAS builds
# (issue 14, "every core busy"): the pthreads build keeps its own worker
# pool, so memgrad's OpenMP kernels stay on one thread beside it; the
# OpenMP build shares OpenMP's pool with oneDNN and memgrad's kernels.
# Both builds are installed side by side (libopenblas-pthread-dev,
# libopenblas-openmp-dev); each run picks one with LD_LIBRARY_PATH, which
# the loader searches before the binary's RUNPATH, and the script checks
# with ldd that it took. Writes bench/results/blas-flavor.txt.
#
#   usage: bench/blas_flavor.sh [BUILD_DIR] [REPEAT]   (build-bench, 9)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build-bench}")
repeat=${2:-9}
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
source "$root/scripts/blas-env.sh"
{
    echo "# bash bench/blas_flavor.sh $*   ($(date -u '+%F %H:%M UTC'), $(git -C "$root" log --oneline -1 | cut -c1-60))"
    echo "# machine: $(nproc)-core VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# median step time (ms) of $repeat steps after a warm-up, policy none; the flavors alternate per row"
    printf "%-38s %8s %10s %10s %8s\n" model threads pthread openmp ratio
    for m in "resnet --depth 32 --batch 16" "mlp --depth 64 --batch 1024 --width 256"; do
        for th in 1 2; do
            declare -A t=()
            for flavor in pthread openmp; do
                dir=/usr/lib/$arch/openblas-$flavor
                got=$(LD_LIBRARY_PATH=$dir ldd "$build/mg-bench" | grep -o "openblas-[a-z]*/libopenblas" | head -1)
                [ "$got" = "openblas-$flavor/libopenblas" ] || { echo "ldd: $got, not $flavor" >&2; exit 1; }
                # shellcheck disable=SC2086
                t[$flavor]=$(LD_LIBRARY_PATH=$dir OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th \
                    "$build/mg-bench" step --model $m --policy none --repeat "$repeat" |
                    sed -n 's/^time_ms_median=//p')
            done
            printf "%-38s %8d %10.1f %10.1f %8.3f\n" "$m" "$th" "${t[pthread]}" "${t[openmp]}" \
                "$(awk -v a="${t[openmp]}" -v b="${t[pthread]}" 'BEGIN { print a / b }')"
        done
    done
} | tee "$here/results/blas-flavor.txt"
