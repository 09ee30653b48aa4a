#!/usr/bin/env bash
# bench/pool_steady/run.sh - what the pool's arena buys (issue 11 item
# 8), comparing two build directories of memgrad (the commit before the
# arena and the one after, each built with mg-bench and libmemgrad.a):
#   1. system allocations per run of the bench's ResNet, run by run
#      (allocs.c, compiled here against each libmemgrad.a);
#   2. its step time by `mg-bench depth`, both builds in alternating
#      rounds so that load from other processes falls on both alike.
#
#   usage: bash bench/pool_steady/run.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]
#
# Writes everything to stdout; bench/results/pool-steady.txt holds one run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
before_dir=$1 after_dir=$2 rounds=${3:-5}
before=$before_dir/mg-bench after=$after_dir/mg-bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs="$(pkg-config --libs igraph openblas 2>/dev/null || echo -ligraph -lopenblas) -lm -lpthread"
for side in before after; do
    dir=$before_dir
    [ "$side" = after ] && dir=$after_dir
    # shellcheck disable=SC2086
    cc -O2 -I"$here/../../include" "$here/allocs.c" "$dir/libmemgrad.a" \
        $libs -o "$tmp/allocs-$side"
    for pol in none memory speed; do
        echo "## $side: allocs $pol"
        "$tmp/allocs-$side" "$pol" 6
    done
done
echo
args=(depth --model resnet --depths 8 --policy none,memory,speed --repeat 11)
echo "# command per round: mg-bench ${args[*]}"
echo "# date: $(date -u +%FT%TZ); nproc: $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
    for side in before after; do
        bin=$before
        [ "$side" = after ] && bin=$after
        "$bin" "${args[@]}" 2>/dev/null | tee -a "$tmp/$side.txt" |
            sed "s/^/$side round $r: /" | grep -v '^.*: #'
    done
done
echo
echo "# summary: median over $rounds rounds of each round's median step time (ms)"
printf '%-8s %10s %10s %8s\n' policy before after gain
for pol in none memory speed; do
    b=$(awk -v p="$pol" '$1=="resnet" && $2==p {print $8}' "$tmp/before.txt" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    a=$(awk -v p="$pol" '$1=="resnet" && $2==p {print $8}' "$tmp/after.txt" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '%-8s %10s %10s %7.1f%%\n' "$pol" "$b" "$a" "$(echo "($b - $a) * 100 / $b" | bc -l)"
done
