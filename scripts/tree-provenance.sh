#!/usr/bin/env bash
# scripts/tree-provenance.sh - what tree is about to run, for a run's log
# (issue 48 item 1: a GPU figure must name the code it ran; runs 6 and 7 of
# 2026-11-27 ran at 1667c30 plus 18 modified files, and an untracked file
# such as src/common/gemm_split.h showed in no log).
#
#   bash scripts/tree-provenance.sh [REPO_DIR]
#
# Prints, for the git working tree at REPO_DIR (default: the current
# directory), the commit it is and a content hash of the tree as it stands
# (tracked files as they are on disk plus untracked files that are not
# ignored: what `git add -A` would commit). The last line is one summary
# line, "provenance: ...", for a run's summary.
#
# Exit status:
#   0  the tree is a commit: `git status --porcelain` is empty, or the
#      tree's content hash equals MG_EXPECT_TREE (below);
#   0  the tree is not a commit but MG_ALLOW_DIRTY=1: then everything needed
#      to know what ran is printed: `git status --porcelain`, the full
#      `git diff HEAD` (staged and unstaged, binary-safe) and its sha256,
#      and each untracked file with its sha256;
#   3  the tree is not a commit and MG_ALLOW_DIRTY is not 1: refused;
#   2  REPO_DIR is no git working tree.
#
# MG_EXPECT_COMMIT and MG_EXPECT_TREE: for a machine whose copy of .git is
# not the one the tree came from. The device tool copies the working tree
# but its .git has named an older commit (d8c9f14 for every 2026-11-27 H100
# run): there `git status` lists every file changed since, though the files
# are exactly a commit made here. The tree's content hash does not depend
# on .git's history: pass this machine's
#     MG_EXPECT_COMMIT=$(git rev-parse HEAD) MG_EXPECT_TREE=$(git rev-parse HEAD^{tree})
# and a tree whose content hashes to MG_EXPECT_TREE is reported as that
# commit, checked by content. (File modes are part of the hash: a copy
# that loses the executable bits does not match, and is refused.)
set -euo pipefail
dir=${1:-.}
if ! git -C "$dir" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    echo "tree-provenance: $dir is not a git working tree" >&2
    exit 2
fi
cd "$(git -C "$dir" rev-parse --show-toplevel)"

head=$(git rev-parse --verify -q HEAD || echo none)
porcelain=$(git status --porcelain --untracked-files=all)

# The tree object `git add -A` would write, computed in a throwaway index
# (a copy of the real one, whose cached stat data spares rehashing unchanged
# files) so that nothing in the repository's own index changes.
idx=$(mktemp "${TMPDIR:-/tmp}/tree-provenance.XXXXXX")
trap 'rm -f "$idx"' EXIT
real_idx=$(git rev-parse --git-path index)
if [ -f "$real_idx" ]; then cp "$real_idx" "$idx"; else rm -f "$idx"; fi
GIT_INDEX_FILE=$idx git add -A
tree=$(GIT_INDEX_FILE=$idx git write-tree)

echo "commit: $head"
echo "worktree tree: $tree (git write-tree of the working tree as it is, untracked files included)"

if [ -z "$porcelain" ]; then
    echo "tree: clean, the commit as it is"
    echo "provenance: $head clean"
    exit 0
fi
if [ -n "${MG_EXPECT_TREE:-}" ] && [ "$tree" = "$MG_EXPECT_TREE" ]; then
    # Content equal to a commit made elsewhere; this .git's status lists
    # changes against its own (older) HEAD only.
    echo "tree: content equals MG_EXPECT_TREE, the tree of commit ${MG_EXPECT_COMMIT:-?}" \
         "(this copy of .git says HEAD $head and $(wc -l <<< "$porcelain") changed paths against it)"
    echo "provenance: ${MG_EXPECT_COMMIT:-tree $tree} clean (checked by content)"
    exit 0
fi
if [ -n "${MG_EXPECT_TREE:-}" ]; then
    echo "tree: content hashes to $tree, not MG_EXPECT_TREE $MG_EXPECT_TREE"
fi

untracked=$(git ls-files --others --exclude-standard)
n_changed=$(git diff HEAD --name-only 2> /dev/null | wc -l || true)
if [ -z "$untracked" ]; then n_untracked=0; else n_untracked=$(wc -l <<< "$untracked"); fi
if [ "${MG_ALLOW_DIRTY:-0}" != 1 ]; then
    {
        echo "tree-provenance: REFUSED: the working tree is not commit $head:"
        echo "$porcelain" | head -40
        [ "$(wc -l <<< "$porcelain")" -gt 40 ] && echo "... ($(wc -l <<< "$porcelain") paths in all)"
        echo "Commit first (a run must name the code it ran), pass MG_EXPECT_COMMIT and"
        echo "MG_EXPECT_TREE where this .git is not the one the tree came from, or set"
        echo "MG_ALLOW_DIRTY=1 to run anyway with the full diff recorded in the log."
    } >&2
    exit 3
fi

# Overridden: record all of it. The diff is against HEAD (staged and
# unstaged together), --binary so that a binary change is in it whole.
diff_file=$(mktemp "${TMPDIR:-/tmp}/tree-provenance-diff.XXXXXX")
trap 'rm -f "$idx" "$diff_file"' EXIT
if [ "$head" = none ]; then : > "$diff_file"; else git diff HEAD --binary > "$diff_file"; fi
diff_sha=$(sha256sum < "$diff_file" | cut -d' ' -f1)
echo "tree: DIRTY, run anyway (MG_ALLOW_DIRTY=1): $n_changed changed tracked files, $n_untracked untracked"
echo "-- git status --porcelain"
echo "$porcelain"
echo "-- untracked files (sha256, path)"
if [ -n "$untracked" ]; then
    while IFS= read -r f; do sha256sum -- "$f"; done <<< "$untracked"
fi
echo "-- git diff HEAD --binary ($(wc -c < "$diff_file") bytes, sha256 $diff_sha)"
cat "$diff_file"
echo "-- end of diff"
echo "provenance: $head + diff sha256 $diff_sha ($n_changed changed, $n_untracked untracked) DIRTY"
