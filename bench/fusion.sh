#!/usr/bin/env bash
# bench/fusion.sh - fused element-wise chains on and off (issue 46, item
# 1): mg-bench step on one thread with --fusion yes and --fusion no,
# interleaved RUNS times, for the GPT (4 layers, d_model 256, seq 512,
# batch 4) and the MLP (16 hidden layers of 256, batch 1024), policy none.
# Per run: the step's median time (over --repeat steps), its predicted and
# measured pool peaks; then per model the median of the per-pair time
# ratios fused / unfused. Writes bench/results/fusion-cpu.txt with the
# command, commit, date and machine.
#   usage: bash bench/fusion.sh [BUILD_DIR] [RUNS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
runs=${2:-5}
out=bench/results/fusion-cpu.txt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# key=value from mg-bench step's output
val() { sed -n "s/^$1=//p" <<< "$2"; }
{
    echo "# bench/fusion.sh $build $runs: fused element-wise chains on vs off, one thread"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include bench || echo ' (modified)')"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for spec in "gpt --depth 4 --batch 4 --width 256 --repeat 3" \
                "mlp --depth 16 --batch 1024 --width 256 --repeat 5"; do
        read -r -a args <<< "$spec"
        echo "\$ $build/mg-bench step --model ${spec} --policy none --fusion yes|no  (x$runs, interleaved)"
        echo "model  run  fused_ms  unfused_ms  ratio   fused_pred  fused_meas  unfused_pred  unfused_meas"
        ratios=()
        for ((r = 1; r <= runs; r++)); do
            a=$("$build/mg-bench" step --model "${args[@]}" --policy none --fusion yes)
            b=$("$build/mg-bench" step --model "${args[@]}" --policy none --fusion no)
            ta=$(val time_ms_median "$a") tb=$(val time_ms_median "$b")
            ratio=$(awk -v a="$ta" -v b="$tb" 'BEGIN { printf "%.3f", a / b }')
            ratios+=("$ratio")
            printf '%-5s %4d %9.1f %11.1f %6s %12s %11s %13s %13s\n' "${args[0]}" "$r" \
                "$ta" "$tb" "$ratio" "$(val predicted_peak_bytes "$a")" "$(val peak_bytes "$a")" \
                "$(val predicted_peak_bytes "$b")" "$(val peak_bytes "$b")"
        done
        printf '%s\n' "${ratios[@]}" | sort -n |
            awk -v m="${args[0]}" '{ v[NR] = $1 } END { printf "# %s: median time ratio fused/unfused %.3f (min %.3f, max %.3f)\n", m, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out.tmp"
mv "$out.tmp" "$out"
cat "$out"
