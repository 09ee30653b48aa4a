#!/usr/bin/env bash
# check_peaks test (issue 48 item 2): scripts/check-peaks.py, which
# check-figures.sh and gpu_run.sh run on the GPU CSVs, on small made-up
# CSVs in a temporary directory (test inputs, not results): equal peaks
# pass and are counted; a differing peak, a memgrad row without its
# numbers, and a file with no memgrad row fail, naming the line; a file
# without the columns (torch-cuda.csv before 2026-11-29) is skipped, said
# so, and does not fail; mg-bench's depth CSV (peak_bytes) is read too.
#
# usage: run.sh SOURCE_DIR
set -euo pipefail
chk=${1:?usage: run.sh SOURCE_DIR}/scripts/check-peaks.py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-peaks-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
h=model,case,depth,time_ms_median,predicted_peak_bytes,measured_peak_bytes
# rc FILE...: the exit status, output in $tmp/o
rc() { local r=0; python3 "$chk" "$@" > "$tmp/o" 2>&1 || r=$?; echo "$r"; }

printf '%s\n' "$h" "mlp,torch-plain,4,1.0,," "mlp,memgrad-none,4,0.5,1024,1024" \
    "mlp,memgrad-memory,4,0.6,512,512" > "$tmp/good.csv"
[ "$(rc "$tmp/good.csv")" = 0 ] || { cat "$tmp/o"; fail "equal peaks failed"; }
grep -q "good.csv: 2 memgrad rows, predicted_peak_bytes == measured_peak_bytes" "$tmp/o" ||
    { cat "$tmp/o"; fail "the two memgrad rows are not counted"; }

printf '%s\n' "$h" "mlp,memgrad-none,4,0.5,1024,1032" > "$tmp/differ.csv"
[ "$(rc "$tmp/differ.csv")" = 1 ] || fail "a differing peak passed"
grep -q "differ.csv:2: predicted_peak_bytes 1024 but measured_peak_bytes 1032" "$tmp/o" ||
    { cat "$tmp/o"; fail "the differing line is not named"; }

printf '%s\n' "$h" "mlp,memgrad-memory,4,0.5,," > "$tmp/empty.csv"
[ "$(rc "$tmp/empty.csv")" = 1 ] || fail "a memgrad row without peaks passed"

printf '%s\n' "$h" "mlp,torch-plain,4,1.0,," > "$tmp/none.csv"
[ "$(rc "$tmp/none.csv")" = 1 ] || fail "a file with no memgrad row passed"

printf '%s\n' model,case,depth,time_ms_median,activation_peak_bytes \
    "mlp,memgrad-none,4,0.5,1024" > "$tmp/old.csv"
[ "$(rc "$tmp/old.csv" "$tmp/good.csv")" = 0 ] || { cat "$tmp/o"; fail "an old file failed"; }
grep -q "old.csv: skipped, no predicted_peak_bytes" "$tmp/o" || { cat "$tmp/o"; fail "the skip is not said"; }

# one bad file among good ones fails the whole call
[ "$(rc "$tmp/good.csv" "$tmp/differ.csv" "$tmp/old.csv")" = 1 ] || fail "a bad file among good ones passed"

printf '%s\n' model,policy,depth,batch,width,peak_bytes,predicted_peak_bytes \
    mlp,none,8,2048,512,4096,4096 mlp,memory,8,2048,512,2048,2056 > "$tmp/depth.csv"
[ "$(rc "$tmp/depth.csv")" = 1 ] || fail "mg-bench depth CSV: a differing row passed"
grep -q "depth.csv:3: predicted_peak_bytes 2056 but peak_bytes 2048" "$tmp/o" || { cat "$tmp/o"; fail "depth CSV line not named"; }
echo "check_peaks: all checks passed"
