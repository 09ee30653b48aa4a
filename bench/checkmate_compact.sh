#!/usr/bin/env bash
# bench/checkmate_compact.sh - issue 29 item 4: the budget policy against
# Checkmate's MILP with and without the compact choice (mg-checkmate
# --compact: every reader of a pack may read the pack or its whole source,
# so each tensor with a compact encoding is kept whole, kept compact or
# recomputed), at each budget itself, on the ResNet and unet-small (the
# models with packs), and without it on the chain and the MLP (nothing to
# compact: the same DAG); then the smallest feasible budget by bisection
# (without compaction, issue 29's target). Two runs at once, one per core;
# GLPK stops each solve after CPU_LIMIT seconds of CPU time (default 15),
# so a loaded machine slows the run but moves the figures little. Writes
# bench/results/checkmate-compact.txt.
#
#   usage: bench/checkmate_compact.sh [BUILD_DIR]   (default: build)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build=${1:-build}
case $build in /*) ;; *) build="$root/$build" ;; esac
cpu=${CPU_LIMIT:-15}
out="$here/results/checkmate-compact.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lim="--cpu-limit $cpu --time-limit 300 --at-budget --bisect"
run() { # name args...
    local n=$1
    shift
    "$build/mg-checkmate" "$@" >"$tmp/$n.csv" 2>"$tmp/$n.err" || echo "rc=$?" >>"$tmp/$n.err"
}
start=$(date -u '+%F %H:%M UTC')
load0=$(uptime)
(run resnet --model resnet --fractions 0.85,0.9,0.95,1.0 $lim --compact
 run chain --model chain --fractions 0.8,0.85,0.9,0.95,1.0 $lim) &
(run unet-small --model unet-small --fractions 0.85,0.9,0.95,1.0 $lim --compact
 run mlp --model mlp --fractions 0.6,0.7,0.8,0.9,1.0 $lim) &
wait
{
    echo "# checkmate-compact.txt - bench/checkmate_compact.sh (issue 29 item 4)"
    echo "# commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src include bench tests ':!bench/results' || echo ' (modified)')"
    echo "# machine: $(nproc)-core $(uname -m) VM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); GLPK $(grep -m1 -o 'GLP_MAJOR_VERSION  *[0-9]*' /usr/include/glpk.h | awk '{print $2}').$(grep -m1 -o 'GLP_MINOR_VERSION  *[0-9]*' /usr/include/glpk.h | awk '{print $2}')"
    echo "# date:    $start to $(date -u '+%H:%M UTC')"
    echo "# load:    before: $load0; after: $(uptime)"
    for n in resnet unet-small chain mlp; do
        case $n in
            resnet) a="--model resnet --fractions 0.85,0.9,0.95,1.0 $lim --compact" ;;
            unet-small) a="--model unet-small --fractions 0.85,0.9,0.95,1.0 $lim --compact" ;;
            chain) a="--model chain --fractions 0.8,0.85,0.9,0.95,1.0 $lim" ;;
            mlp) a="--model mlp --fractions 0.6,0.7,0.8,0.9,1.0 $lim" ;;
        esac
        echo
        echo "\$ mg-checkmate $a"
        cat "$tmp/$n.csv"
        [ -s "$tmp/$n.err" ] && sed 's/^/# stderr: /' "$tmp/$n.err"
    done
} >"$out"
echo "bench/checkmate_compact.sh: wrote $out"
