#!/usr/bin/env bash
# bench/ddp/run.sh - data-parallel bench (issue 16): build mg-bench-ddp in
# Release, run it under mpirun at 1 and 2 ranks, and write
# bench/results/ddp.csv (all rows) and bench/results/ddp.txt (machine,
# command lines, and the scaling table computed from the CSV).
#
#   usage: bash bench/ddp/run.sh        env: MG_BUILD_DIR (build-bench),
#          DDP_ARGS (extra mg-bench-ddp options, e.g. "--steps 20")
#
# Weak scaling: the same batch per rank at 1 and 2 ranks (2x the samples
# per step at 2 ranks); efficiency = step time at 1 rank / at 2 ranks.
# Strong scaling: the global batch of the 1-rank run split over 2 ranks;
# efficiency = step(1 rank) / (2 x step(2 ranks)). Each rank runs OpenBLAS
# on one thread, so 1 rank uses one core and 2 ranks two.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

build=${MG_BUILD_DIR:-build-bench}
res=bench/results
mkdir -p "$res"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_BUILD_TESTS=OFF \
    -DMG_BUILD_EXAMPLES=OFF -DMG_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j2 --target mg-bench-ddp >/dev/null
bench="$build/mg-bench-ddp"

cores=$(nproc --all) # before OMP_NUM_THREADS=1, which nproc obeys
source scripts/blas-env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# CI and this machine run as root; Open MPI refuses that unless told.
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
batch=16
args=(--model resnet --depth 8 --width 16 --image 32 --steps 10 --warmup 2)
# shellcheck disable=SC2206
args+=(${DDP_ARGS:-})

csv="$res/ddp.csv"
txt="$res/ddp.txt"
commit="$(git rev-parse HEAD)$(git diff --quiet HEAD -- src include bench/ddp || echo ' (with uncommitted changes)')"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $commit"
    echo "uname: $(uname -srm)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "cores: $cores (shared: other jobs ran on this machine; load average at start: $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "mpi: $(mpirun --version | head -1)"
    echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_NUM_THREADS=1"
    echo
} >"$txt"

: >"$csv.tmp"
for run in "1 $batch" "2 $batch" "2 $((batch / 2))"; do
    set -- $run
    cmd=("${mpirun[@]}" -np "$1" "$bench" "${args[@]}" --batch "$2")
    echo "+ ${cmd[*]}" | tee -a "$txt" >&2
    "${cmd[@]}" >"$res/ddp.run.tmp"
    if [ ! -s "$csv.tmp" ]; then head -1 "$res/ddp.run.tmp" >"$csv.tmp"; fi
    tail -n +2 "$res/ddp.run.tmp" >>"$csv.tmp"
done
rm -f "$res/ddp.run.tmp"
mv "$csv.tmp" "$csv"

{
    echo
    echo "rows: $csv (times are medians over steps; ar_min = the fastest"
    echo "rank's time in mg_dist_allreduce, ar_max = the slowest's, which"
    echo "includes waiting for the other rank's backward pass)"
    echo
    awk -F, -v B="$batch" '
        NR == 1 { next }
        { key = $6; step[$1 "," $5 "," key] = $7; share[$1 "," $5 "," key] = $11
          peak[$1 "," $5 "," key] = $12; buf[$1 "," $5 "," key] = $14
          arm[$1 "," $5 "," key] = $9; pol[key] = 1; order[++n] = key }
        END {
          printf "%-7s %9s %9s %9s %6s %6s %9s %9s %11s %10s\n", "policy",
                 "1r ms", "2r ms", "2r/2 ms", "weak", "strong", "ar 2r ms",
                 "ar share", "peak/rank", "dist buf"
          for (i = 1; i <= n; i++) {
            k = order[i]; if (seen[k]++) continue
            s1 = step["1," B "," k]; s2 = step["2," B "," k]
            h = B / 2; s2h = step["2," h "," k]
            printf "%-7s %9.1f %9.1f %9.1f %5.0f%% %5.0f%% %9.2f %8.1f%% %8.2f MB %7.2f MB\n",
                   k, s1, s2, s2h, 100 * s1 / s2, 100 * s1 / (2 * s2h),
                   arm["2," B "," k], 100 * share["2," B "," k],
                   peak["2," B "," k], buf["2," B "," k]
          }
        }' "$csv"
    echo
    echo "weak = step(1 rank, batch $batch) / step(2 ranks, batch $batch each);"
    echo "strong = step(1 rank, batch $batch) / (2 x step(2 ranks, batch $((batch / 2)) each));"
    echo "ar share = ar_min / step at 2 ranks, batch $batch; peak/rank = pool"
    echo "peak in use (activations, recomputed values, temporaries; max over"
    echo "ranks), the same at 1 and 2 ranks; dist buf = the buckets' staging"
    echo "memory (packed + received gradients), on top of the parameters'"
    echo "and gradients' caller memory."
} >>"$txt"
cat "$txt"
