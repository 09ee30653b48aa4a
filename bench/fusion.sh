#!/usr/bin/env bash
# bench/fusion.sh - fused element-wise chains on and off (issue 46, item
# 1): mg-bench step on one thread with --fusion yes and --fusion no,
# interleaved RUNS times, for the GPT (4 layers, d_model 256, seq 512,
# batch 4) and the MLP (16 hidden layers of 256, batch 1024), policy none.
# Per run: the process's CPU seconds (user + sys, /usr/bin/time: setup,
# one warm-up and the timed steps), the step's median wall time (over
# --repeat steps, which a loaded machine inflates), and the predicted and
# measured pool peaks; then per model the median of the per-pair CPU-time
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
tf=$(mktemp)
trap 'rm -f "$tf"' EXIT
# run ARGS...: mg-bench step's output and a line cpu=<its CPU seconds>
run() {
    local o
    o=$(/usr/bin/time -f '%U %S' -o "$tf" "$build/mg-bench" step "$@")
    cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$tf")
    printf '%s\ncpu=%s\n' "$o" "$cpu"
}
{
    echo "# bench/fusion.sh $build $runs: fused element-wise chains on vs off, one thread"
    echo "# commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include bench || echo ' (modified)')"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for spec in "gpt --depth 4 --batch 4 --width 256 --repeat 3" \
                "mlp --depth 16 --batch 1024 --width 256 --repeat 5"; do
        read -r -a args <<< "$spec"
        echo "\$ $build/mg-bench step --model ${spec} --policy none --fusion yes|no  (x$runs, interleaved)"
        echo "model  run  fused_cpu_s  unfused_cpu_s  cpu_ratio  fused_step_ms  unfused_step_ms  fused_pred  fused_meas  unfused_pred  unfused_meas"
        ratios=()
        for ((r = 1; r <= runs; r++)); do
            a=$(run --model "${args[@]}" --policy none --fusion yes)
            ca=$(sed -n 's/^cpu=//p' <<< "$a")
            b=$(run --model "${args[@]}" --policy none --fusion no)
            cb=$(sed -n 's/^cpu=//p' <<< "$b")
            ratio=$(awk -v a="$ca" -v b="$cb" 'BEGIN { printf "%.3f", a / b }')
            ratios+=("$ratio")
            printf '%-5s %4d %12s %14s %10s %14s %16s %11s %11s %13s %13s\n' "${args[0]}" "$r" \
                "$ca" "$cb" "$ratio" "$(val time_ms_median "$a")" "$(val time_ms_median "$b")" \
                "$(val predicted_peak_bytes "$a")" "$(val peak_bytes "$a")" \
                "$(val predicted_peak_bytes "$b")" "$(val peak_bytes "$b")"
        done
        printf '%s\n' "${ratios[@]}" | sort -n |
            awk -v m="${args[0]}" '{ v[NR] = $1 } END { printf "# %s: median CPU-time ratio fused/unfused %.3f (min %.3f, max %.3f)\n", m, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out.tmp"
mv "$out.tmp" "$out"
cat "$out"
