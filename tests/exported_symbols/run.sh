#!/usr/bin/env bash
# exported_symbols test: the dynamic symbols a shared libmemgrad defines must
# be exactly the functions declared in include/*.h. An extra one is an
# internal function that leaks (it lacks hidden visibility); a missing one is
# a public declaration without MG_API (or without a definition).
#
# The declarations come from the compiler, not from a pattern over C text:
# GCC's -aux-info writes a prototype, with its file and line, for every
# function a translation unit declares; here a unit that includes every
# public header.
#
# usage: run.sh <shared-library> <include-dir>
# env (set by ctest): MG_CC (a GCC), MG_NM.
set -euo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 <shared-library> <include-dir>" >&2
    exit 2
fi
lib=$1
inc=$(cd "$2" && pwd)
cc_bin=${MG_CC:-gcc}
nm_bin=${MG_NM:-nm}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/memgrad-symbols.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

for h in "$inc"/*.h; do
    printf '#include "%s"\n' "$(basename "$h")"
done >"$tmp/all.c"
"$cc_bin" -std=c11 -I"$inc" -fsyntax-only -aux-info "$tmp/aux.txt" "$tmp/all.c"
# /* /abs/include/memgrad.h:74:NC */ extern const char *mg_dtype_name (mg_dtype);
# Static inline functions in a header are not part of the library.
grep -F "/* $inc/" "$tmp/aux.txt" | grep -v '\*/ static ' |
    sed -E 's|^/\*[^*]*\*/ ||; s|^([^(]*[^A-Za-z0-9_])?([A-Za-z_][A-Za-z0-9_]*) \(.*|\2|' |
    sort -u >"$tmp/declared"

# Undefined and weak references (U, w, v) are not the library's own.
"$nm_bin" -D --defined-only "$lib" | awk '$2 ~ /^[A-Z]$/ && $2 != "W" && $2 != "V" {print $3}' |
    sort -u >"$tmp/exported"

n_declared=$(wc -l <"$tmp/declared")
n_exported=$(wc -l <"$tmp/exported")
echo "declared in $inc: $n_declared functions; exported by $lib: $n_exported symbols"
if [ "$n_declared" -eq 0 ]; then
    echo "FAIL: found no declarations in $inc (did -aux-info change format?)" >&2
    exit 1
fi

status=0
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "FAIL: exported but not declared in include/ (make them static," \
         "or internal and hidden):" >&2
    echo "$extra" | sed 's/^/  /' >&2
    status=1
fi
if [ -n "$missing" ]; then
    echo "FAIL: declared in include/ but not exported (no MG_API, or no" \
         "definition):" >&2
    echo "$missing" | sed 's/^/  /' >&2
    status=1
fi
[ "$status" -eq 0 ] && echo "ok: the exported symbols are the public API"
exit "$status"
