#!/usr/bin/env bash
# scripts/check-figures.sh - the deterministic figures of the committed
# results, checked (issue 32 item 2): fails on any difference.
#
#   bash scripts/check-figures.sh BUILD_DIR
#
# 1. Predicted equals measured: in every committed CSV that has both a
#    predicted and a measured pool peak (depth, budget, ONNX, DDP and the
#    per-step timelines), row by row, exactly.
# 2. Recomputed from today's code: the depth sweep's predicted peaks and
#    recomputed-flop fractions (bench/results/depth-mlp.csv), planned again
#    by BUILD_DIR's mg-bench (depth --plan-only yes, under a second), must
#    equal the committed ones. A change that moves them must commit the
#    results it moves, made again.
#
# 3. Provenance: every bench/results/*.txt names a
#    commit, a date, the machine and the command that made it (in its first
#    24 lines).
#
# 2b. The same for the compacting budget policy's MLP rows
#    (bench/results/compact-budget.csv, bench/compact_budget.sh).
#
# Not yet recomputed here (only checked for 1.): the budget, ONNX, DDP,
# timeline and Pareto runs, whose plans come from other commands.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:?usage: check-figures.sh BUILD_DIR}
res=bench/results
status=0

# equal_columns FILE PREDICTED_COLUMN MEASURED_COLUMN: every row equal
equal_columns() {
    awk -F, -v p="$2" -v m="$3" -v f="$1" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i
                  if (!col[p] || !col[m]) { print f ": no column " p " or " m; bad = 1; exit 1 }
                  next }
        $(col[p]) != $(col[m]) { print f ":" NR ": " p " " $(col[p]) " but " m " " $(col[m]); bad = 1 }
        END { exit bad }' "$1" >&2 || status=1
}
equal_columns $res/depth-mlp.csv predicted_peak_bytes peak_bytes
equal_columns $res/budget-mlp.csv predicted_peak_bytes peak_bytes
equal_columns $res/onnx.csv predicted_peak_bytes measured_peak_bytes
equal_columns $res/onnx-torch.csv predicted_peak_bytes measured_peak_bytes
equal_columns $res/ddp.csv predicted_peak_mb pool_peak_mb
equal_columns $res/ddp-overlap.csv predicted_peak_mb pool_peak_mb
for f in $res/timeline-*.csv; do
    equal_columns "$f" predicted_bytes_before measured_bytes_before
    equal_columns "$f" predicted_bytes_after measured_bytes_after
done

# The depth sweep, planned again: its parameters from the committed CSV.
args=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { m = $(col["model"]); b = $(col["batch"]); w = $(col["width"])
      if (!(($(col["depth"])) in seen)) { seen[$(col["depth"])] = 1; d = d (d ? "," : "") $(col["depth"]) }
      if (!(($(col["policy"])) in seenp)) { seenp[$(col["policy"])] = 1; p = p (p ? "," : "") $(col["policy"]) } }
    END { print "--model " m " --batch " b " --width " w " --depths " d " --policy " p }' \
    $res/depth-mlp.csv)
# shellcheck disable=SC2086 # word splitting of args is meant
now=$("$build/mg-bench" depth $args --plan-only yes 2> /dev/null)
want=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i
        print "model,policy,depth,batch,width,predicted_peak_bytes,recompute_flops_ratio"; next }
    { print $(col["model"]) "," $(col["policy"]) "," $(col["depth"]) "," $(col["batch"]) "," \
            $(col["width"]) "," $(col["predicted_peak_bytes"]) "," $(col["recompute_flops_ratio"]) }' \
    $res/depth-mlp.csv)
if [ "$now" != "$want" ]; then
    echo "check-figures: $res/depth-mlp.csv: planned again ($build/mg-bench depth $args --plan-only yes), predicted peaks or recomputed flops differ (< committed, > now):" >&2
    diff <(echo "$want") <(echo "$now") >&2 || true
    status=1
fi
# The compacting budget policy beside the plain one (bench/compact_budget.sh),
# planned again: the MLP's rows of bench/results/compact-budget.csv.
args=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { f = f (f ? "," : "") $(col["budget_fraction"])
      a = "--model " $(col["model"]) " --depth " $(col["depth"]) " --batch " $(col["batch"]) \
          " --width " $(col["width"]) " --dropout " $(col["dropout"]) }
    END { print a " --fractions " f }' $res/compact-budget.csv)
# shellcheck disable=SC2086 # word splitting of args is meant
now=$("$build/mg-bench" budget $args --plan-only yes 2> /dev/null)
if [ "$now" != "$(cat $res/compact-budget.csv)" ]; then
    echo "check-figures: $res/compact-budget.csv: planned again ($build/mg-bench budget $args --plan-only yes), rows differ (< committed, > now):" >&2
    diff $res/compact-budget.csv <(echo "$now") >&2 || true
    status=1
fi
# 3. provenance of every results file
python3 - "$res" <<'PY' || status=1
import glob, re, sys
need = {
    "commit": r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b",
    "date": r"20\d\d-\d\d-\d\d|\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w+ +\d+ ",
    "machine": r"(?i)machine|\bcores?\b|\bcpu\b|EPYC|Xeon|x86_64|H100|H200|GPU",
    "command": r"(?im)^#? *\$ |command|bench/|scripts/|mg-bench|memgrad-onnx|\.sh\b",
}
bad = 0
for f in sorted(glob.glob(sys.argv[1] + "/*.txt")):
    head = "\n".join(open(f, errors="replace").read().splitlines()[:24])
    miss = [k for k, rx in need.items() if not re.search(rx, head)]
    if miss:
        print("check-figures: %s names no %s in its first 24 lines"
              % (f, ", no ".join(miss)), file=sys.stderr)
        bad = 1
sys.exit(bad)
PY
[ "$status" = 0 ] && echo "check-figures: committed figures agree"
exit "$status"
