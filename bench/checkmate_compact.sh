#!/usr/bin/env bash
# bench/checkmate_compact.sh - issue 29 item 4: the budget policy against
# Checkmate's MILP with and without the compact choice (mg-checkmate
# --compact: every reader of a pack may read the pack or its whole source,
# so each tensor with a compact encoding is kept whole, kept compact or
# recomputed), at each budget itself, on the ResNet and unet-small (the
# models with packs), and without it on the chain and the MLP (nothing to
# compact: the same DAG); then the smallest feasible budget by bisection
# (without compaction, issue 29's target). Two runs at once, one per core;
# the solver stops each solve after CPU_LIMIT seconds of CPU time (default
# 15), so a loaded machine slows the run but moves the figures little.
# SOLVER=glpk (the default) writes bench/results/checkmate-compact.txt;
# SOLVER=cbc (mg-checkmate --solver cbc, where CMake found CBC) writes
# bench/results/checkmate-cbc.txt, with the ResNet at every 0.01 from 0.85
# to 1.00, and mg_model_unet's 79-op U-Net and the 102-op transformer,
# which GLPK cannot solve.
#
#   usage: [SOLVER=glpk|cbc] [CPU_LIMIT=S] bench/checkmate_compact.sh [BUILD_DIR]
#   (default: build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/paths.sh"
build=$(bench_build "${1:-build}")
cpu=${CPU_LIMIT:-15}
solver=${SOLVER:-glpk}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lim="--cpu-limit $cpu --time-limit $((cpu * 20)) --at-budget --bisect --solver $solver"
declare -A args
args[chain]="--model chain --fractions 0.8,0.85,0.9,0.95,1.0 $lim"
args[mlp]="--model mlp --fractions 0.6,0.7,0.8,0.9,1.0 $lim"
args[unet-small]="--model unet-small --fractions 0.85,0.9,0.95,1.0 $lim --compact"
case $solver in
glpk)
    out="$here/results/checkmate-compact.txt"
    args[resnet]="--model resnet --fractions 0.85,0.9,0.95,1.0 $lim --compact"
    first=(resnet chain) second=(unet-small mlp)
    ;;
cbc)
    out="$here/results/checkmate-cbc.txt"
    args[resnet]="--model resnet --fractions $(seq -s, 0.85 0.01 1.00) $lim --compact"
    args[unet]="--model unet --fractions 0.8,0.85,0.9,0.95,1.0 $lim --compact"
    args[transformer]="--model transformer --fractions 0.95,0.99,1.0 $lim"
    first=(unet chain) second=(resnet unet-small mlp transformer)
    ;;
*) echo "checkmate_compact.sh: SOLVER is glpk or cbc" >&2; exit 2 ;;
esac
run() { # name
    # shellcheck disable=SC2086 # args are words
    "$build/mg-checkmate" ${args[$1]} >"$tmp/$1.csv" 2>"$tmp/$1.err" || echo "rc=$?" >>"$tmp/$1.err"
}
start=$(date -u '+%F %H:%M UTC')
load0=$(uptime)
(for n in "${first[@]}"; do run "$n"; done) &
(for n in "${second[@]}"; do run "$n"; done) &
wait
{
    echo "# $(basename "$out") - SOLVER=$solver CPU_LIMIT=$cpu bash bench/checkmate_compact.sh (issue 29 item 4)"
    echo "# commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src include bench tests ':!bench/results' || echo ' (modified)')"
    echo "# machine: $(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); GLPK $(grep -m1 -o 'GLP_MAJOR_VERSION  *[0-9]*' /usr/include/glpk.h | awk '{print $2}').$(grep -m1 -o 'GLP_MINOR_VERSION  *[0-9]*' /usr/include/glpk.h | awk '{print $2}'); CBC $(pkg-config --modversion cbc 2>/dev/null || echo absent)"
    echo "# date:    $start to $(date -u '+%H:%M UTC')"
    echo "# load:    before: $load0; after: $(uptime)"
    for n in "${first[@]}" "${second[@]}"; do
        echo
        echo "\$ mg-checkmate ${args[$n]}"
        cat "$tmp/$n.csv"
        if [ -s "$tmp/$n.err" ]; then sed 's/^/# stderr: /' "$tmp/$n.err"; fi
    done
} >"$out"
echo "bench/checkmate_compact.sh: wrote $out"
