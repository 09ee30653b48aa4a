#!/usr/bin/env bash
# tree_provenance test (issue 48 item 1): scripts/tree-provenance.sh on a
# temporary git repository, and bench/gpu_run.sh refusing a dirty tree
# before it does anything else. Needs git, no GPU.
#
# A clean tree passes and names its commit; a modified, a staged-only and
# an untracked file are each refused (exit 3) and named; an ignored file is
# not; MG_ALLOW_DIRTY=1 runs anyway and records the full diff, whose sha256
# must equal the diff's own, and each untracked file with its sha256; a
# tree whose content equals MG_EXPECT_TREE passes under a stale HEAD, and
# one that differs from it is refused.
#
# usage: run.sh SOURCE_DIR
set -euo pipefail
src=$(cd "${1:?usage: run.sh SOURCE_DIR}" && pwd)
prov=$src/scripts/tree-provenance.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tree-provenance-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# prov_rc DIR OUTFILE [ENV...]: the script's exit status, stdout+stderr in OUTFILE
prov_rc() {
    local d=$1 o=$2 rc=0
    shift 2
    env "$@" bash "$prov" "$d" > "$o" 2>&1 || rc=$?
    echo "$rc"
}

r=$tmp/repo
mkdir -p "$r"
git -C "$r" init -q
git -C "$r" config user.email test@example.invalid
git -C "$r" config user.name test
printf 'a\n' > "$r/a.txt"
printf 'ignored.log\n' > "$r/.gitignore"
git -C "$r" add -A
git -C "$r" commit -qm one
c1=$(git -C "$r" rev-parse HEAD)
t1=$(git -C "$r" rev-parse 'HEAD^{tree}')

# clean: passes, names the commit and the commit's own tree
[ "$(prov_rc "$r" "$tmp/o")" = 0 ] || { cat "$tmp/o"; fail "clean tree refused"; }
grep -qx "provenance: $c1 clean" "$tmp/o" || { cat "$tmp/o"; fail "clean: no provenance line naming $c1"; }
grep -q "^worktree tree: $t1 " "$tmp/o" || fail "clean: worktree tree is not the commit's tree $t1"

# an ignored file changes nothing
echo x > "$r/ignored.log"
[ "$(prov_rc "$r" "$tmp/o")" = 0 ] || { cat "$tmp/o"; fail "an ignored file was refused"; }

# a modified tracked file: refused, named, and the override variable told
printf 'a changed\n' > "$r/a.txt"
[ "$(prov_rc "$r" "$tmp/o")" = 3 ] || { cat "$tmp/o"; fail "a modified file was not refused"; }
{ grep -q "REFUSED" "$tmp/o" && grep -q " M a.txt" "$tmp/o" && grep -q MG_ALLOW_DIRTY "$tmp/o"; } ||
    { cat "$tmp/o"; fail "refusal does not name a.txt or the override"; }
# MG_ALLOW_DIRTY other than 1 does not override
[ "$(prov_rc "$r" "$tmp/o" MG_ALLOW_DIRTY=yes)" = 3 ] || fail "MG_ALLOW_DIRTY=yes overrode"

# staged only (the working file equal to the index): still refused
git -C "$r" add a.txt
[ "$(prov_rc "$r" "$tmp/o")" = 3 ] || fail "a staged change was not refused"
git -C "$r" reset -q a.txt

# an untracked file too, and alone
git -C "$r" stash -q
mkdir -p "$r/src/common"
printf '#define SPLIT 1\n' > "$r/src/common/gemm_split.h"
[ "$(prov_rc "$r" "$tmp/o")" = 3 ] || fail "an untracked file was not refused"
grep -q "src/common/gemm_split.h" "$tmp/o" || fail "refusal does not name the untracked file"
git -C "$r" stash pop -q

# overridden: the full diff, its sha256, the untracked files with theirs
[ "$(prov_rc "$r" "$tmp/o" MG_ALLOW_DIRTY=1)" = 0 ] || { cat "$tmp/o"; fail "MG_ALLOW_DIRTY=1 refused"; }
want_sha=$(git -C "$r" diff HEAD --binary | sha256sum | cut -d' ' -f1)
grep -q "^provenance: $c1 + diff sha256 $want_sha (1 changed, 1 untracked) DIRTY$" "$tmp/o" ||
    { cat "$tmp/o"; fail "override: provenance line lacks the diff's sha256 $want_sha"; }
# the recorded diff is the diff itself, byte for byte
sed -n '/^-- git diff HEAD --binary/,/^-- end of diff$/p' "$tmp/o" | sed '1d;$d' > "$tmp/recorded.diff"
[ "$(sha256sum < "$tmp/recorded.diff" | cut -d' ' -f1)" = "$want_sha" ] ||
    { cat "$tmp/o"; fail "override: the diff in the log is not git diff HEAD"; }
grep -q "^+a changed$" "$tmp/recorded.diff" || fail "override: the diff lacks the change"
h=$(sha256sum < "$r/src/common/gemm_split.h" | cut -d' ' -f1)
grep -q "^$h  src/common/gemm_split.h$" "$tmp/o" || { cat "$tmp/o"; fail "override: untracked file and its sha256 not listed"; }

# a .git that is not the tree's (the device's stale copy): commit the
# changes as c2, then move HEAD back to c1 without touching the files
git -C "$r" add -A
git -C "$r" commit -qm two
c2=$(git -C "$r" rev-parse HEAD)
t2=$(git -C "$r" rev-parse 'HEAD^{tree}')
git -C "$r" reset -q --soft "$c1"
git -C "$r" reset -q
[ "$(prov_rc "$r" "$tmp/o")" = 3 ] || fail "stale HEAD without MG_EXPECT_TREE was not refused"
[ "$(prov_rc "$r" "$tmp/o" MG_EXPECT_COMMIT="$c2" MG_EXPECT_TREE="$t2")" = 0 ] ||
    { cat "$tmp/o"; fail "content equal to MG_EXPECT_TREE refused"; }
grep -qx "provenance: $c2 clean (checked by content)" "$tmp/o" || { cat "$tmp/o"; fail "expected tree: provenance line"; }
# one byte more and it is not that commit
echo more >> "$r/a.txt"
[ "$(prov_rc "$r" "$tmp/o" MG_EXPECT_COMMIT="$c2" MG_EXPECT_TREE="$t2")" = 3 ] ||
    fail "content differing from MG_EXPECT_TREE was not refused"
grep -q "not MG_EXPECT_TREE $t2" "$tmp/o" || fail "the mismatch is not said"
# the repository's own index was not touched by any of it
[ -z "$(git -C "$r" diff --cached --name-only)" ] || fail "the script changed the real index"

# not a repository
[ "$(prov_rc "$tmp" "$tmp/o")" = 2 ] || fail "a non-repository did not exit 2"

# bench/gpu_run.sh itself, in a copy: a dirty tree is refused first, with
# exit 3, before the machine step (no nvidia-smi, no build); the refusal
# and the summary are in OUTDIR
g=$tmp/gpu
mkdir -p "$g/bench" "$g/scripts"
cp "$src/bench/gpu_run.sh" "$g/bench/"
cp "$prov" "$g/scripts/"
git -C "$g" init -q
git -C "$g" config user.email test@example.invalid
git -C "$g" config user.name test
git -C "$g" add -A
git -C "$g" commit -qm gpu
echo untracked > "$g/new.c"
rc=0
PATH=/usr/bin:/bin timeout 60 bash "$g/bench/gpu_run.sh" "$tmp/out" > "$tmp/gpu.txt" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$tmp/gpu.txt"; fail "gpu_run.sh on a dirty tree exited $rc, not 3"; }
{ grep -q "REFUSED" "$tmp/out/run.log" && grep -q "new.c" "$tmp/out/run.log"; } ||
    { cat "$tmp/out/run.log"; fail "gpu_run.sh's run.log does not hold the refusal"; }
grep -q "== machine" "$tmp/out/run.log" && fail "gpu_run.sh went on past the refusal"
grep -q "REFUSED" "$tmp/out/summary.txt" || fail "gpu_run.sh's summary does not say it refused"
echo "tree_provenance: all checks passed"
