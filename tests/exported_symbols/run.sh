#!/usr/bin/env bash
# exported_symbols test: the dynamic symbols a shared library of memgrad
# defines must be exactly the functions declared in its public headers. An
# extra one is an internal function that leaks (it lacks hidden visibility);
# a missing one is a public declaration without MG_API (or without a
# definition).
#
# The declarations come from the compiler, not from a pattern over C text:
# GCC's -aux-info writes a prototype, with its file and line, for every
# function a translation unit declares; here a unit that includes the
# library's public headers.
#
# usage: run.sh <shared-library> <header>...
#   the headers: the library's public ones (CMakeLists.txt passes every
#   include/*.h but those of other libraries, such as memgrad_dist.h)
# env (set by ctest): MG_CC (a GCC), MG_NM; MG_CFLAGS: flags the headers
#   need (-I for mpi.h, say); MG_ARCHIVE: the static library built from the
#   same objects. Its hidden globals are internal, and an internal name must
#   not look public: the mg_ prefix is the API's, internals use mgi_ (as
#   igraph_i_ or Lua's luaC_), so a reader knows which is which.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 <shared-library> <header>..." >&2
    exit 2
fi
lib=$1
shift
cc_bin=${MG_CC:-gcc}
nm_bin=${MG_NM:-nm}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/memgrad-symbols.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

headers=()
for h in "$@"; do
    headers+=("$(cd "$(dirname "$h")" && pwd)/$(basename "$h")")
done
for h in "${headers[@]}"; do
    printf '#include "%s"\n' "$h"
done >"$tmp/all.c"
# shellcheck disable=SC2086 # MG_CFLAGS holds several flags
"$cc_bin" -std=c11 ${MG_CFLAGS:-} -fsyntax-only -aux-info "$tmp/aux.txt" \
    "$tmp/all.c"
# /* /abs/include/memgrad.h:74:NC */ extern const char *mg_dtype_name (mg_dtype);
# Only the named headers count (memgrad_dist.h includes memgrad.h, whose
# functions are another library's); static inline functions in a header are
# not part of the library.
for h in "${headers[@]}"; do
    grep -F "/* $h:" "$tmp/aux.txt" || true
done | grep -v '\*/ static ' |
    sed -E 's|^/\*[^*]*\*/ ||; s|^([^(]*[^A-Za-z0-9_])?([A-Za-z_][A-Za-z0-9_]*) \(.*|\2|' |
    sort -u >"$tmp/declared"

# Undefined and weak references (U, w, v) are not the library's own.
"$nm_bin" -D --defined-only "$lib" | awk '$2 ~ /^[A-Z]$/ && $2 != "W" && $2 != "V" {print $3}' |
    sort -u >"$tmp/exported"

n_declared=$(wc -l <"$tmp/declared")
n_exported=$(wc -l <"$tmp/exported")
echo "declared in $*: $n_declared functions; exported by $lib: $n_exported symbols"
if [ "$n_declared" -eq 0 ]; then
    echo "FAIL: found no declarations in $* (did -aux-info change format?)" >&2
    exit 1
fi

status=0
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "FAIL: exported but not declared in the public headers (make them" \
         "static, or leave them hidden):" >&2
    echo "$extra" | sed 's/^/  /' >&2
    status=1
fi
if [ -n "$missing" ]; then
    echo "FAIL: declared in the public headers but not exported (no MG_API," \
         "or no definition):" >&2
    echo "$missing" | sed 's/^/  /' >&2
    status=1
fi
if [ -n "${MG_ARCHIVE:-}" ]; then
    "$nm_bin" -g --defined-only "$MG_ARCHIVE" 2>/dev/null |
        awk 'NF == 3 && $2 ~ /^[TDBRC]$/ {print $3}' | grep '^mg_' |
        sort -u >"$tmp/archive_mg" || true
    internal=$(comm -23 "$tmp/archive_mg" "$tmp/declared")
    echo "$MG_ARCHIVE: $(wc -l <"$tmp/archive_mg") global mg_ symbols"
    if [ -n "$internal" ]; then
        echo "FAIL: internal symbols with the public mg_ prefix (rename them" \
             "mgi_, or declare them in include/ with MG_API):" >&2
        echo "$internal" | sed 's/^/  /' >&2
        status=1
    fi
fi
[ "$status" -eq 0 ] && echo "ok: the exported symbols are the public API"
exit "$status"
