#!/usr/bin/env bash
# bench/ddp/overlap.sh - what mg_dist_buckets_observer (issue 16: the
# gradient exchange overlapping the backward pass) changes in a 2-rank
# step: mg-bench-ddp with --overlap 0 and 1, alternated for ROUNDS rounds
# so that the machine's load hits both alike, at small buckets (many
# exchanges to overlap) and at the default 25 MiB (one bucket: nothing to
# overlap). Writes bench/results/ddp-overlap.csv and .txt (medians over
# rounds of each run's median step).
#
#   usage: bash bench/ddp/overlap.sh     env: MG_BUILD_DIR (build-bench),
#          ROUNDS (5), DDP_ARGS (extra mg-bench-ddp options)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

build=${MG_BUILD_DIR:-build-bench}
res=bench/results
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_BUILD_TESTS=OFF \
    -DMG_BUILD_EXAMPLES=OFF -DMG_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j2 --target mg-bench-ddp >/dev/null
bench="$build/mg-bench-ddp"
source scripts/blas-env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
rounds=${ROUNDS:-5}
args=(--model resnet --depth 8 --width 32 --image 32 --batch 16 --steps 10
      --warmup 2 --policies none,memory)
# shellcheck disable=SC2206
args+=(${DDP_ARGS:-})

csv="$res/ddp-overlap.csv"
txt="$res/ddp-overlap.txt"
# The header is mg-bench-ddp's own, after the two columns added here.
header=$("${mpirun[@]}" -np 1 "$bench" "${args[@]}" --steps 1 --warmup 0 \
    --policies none | head -1)
echo "round,bucket_kb,$header" >"$csv"
for r in $(seq 1 "$rounds"); do
    for kb in 64 25600; do
        for ov in 0 1; do
            "${mpirun[@]}" -np 2 "$bench" "${args[@]}" --bucket-kb "$kb" \
                --overlap "$ov" | tail -n +2 | sed "s/^/$r,$kb,/" >>"$csv"
        done
    done
done
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD)"
    echo "machine: $(nproc --all) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "command: mpirun -np 2 $bench ${args[*]} --bucket-kb K --overlap 0|1, $rounds alternating rounds"
    echo
    awk -F, 'NR > 1 { k = $2 "," $8 "," $20; n[k]++; v[k, n[k]] = $9; a[k, n[k]] = $11; b[$2] = $19 }
        function med(k, arr,   i, j, t, m, x) {
            m = n[k]; for (i = 1; i <= m; i++) x[i] = arr[k, i]
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
                if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
            return m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2 }
        END {
            printf "%-9s %-7s %-8s %12s %12s %12s %12s %8s\n", "bucket_kb", "buckets", "policy", "step_ms_off", "step_ms_on", "ar_min_off", "ar_min_on", "on/off"
            split("64,25600", kbs, ","); split("none,memory", pols, ",")
            for (i = 1; i <= 2; i++) for (j = 1; j <= 2; j++) {
                off = kbs[i] "," pols[j] ",0"; on = kbs[i] "," pols[j] ",1"
                so = med(off, v); sn = med(on, v)
                printf "%-9s %-7s %-8s %12.2f %12.2f %12.2f %12.2f %8.3f\n", kbs[i], b[kbs[i]], pols[j], so, sn, med(off, a), med(on, a), sn / so
            } }' "$csv"
    echo
    echo "step_ms: median over rounds of each run's median step (slowest rank's"
    echo "run + allreduce); ar_min: the fastest rank's time in mg_dist_allreduce."
} >"$txt"
cat "$txt"
