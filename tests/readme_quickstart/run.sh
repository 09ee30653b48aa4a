#!/usr/bin/env bash
# tests/readme_quickstart/run.sh README FILE BINARY - the README's C quick
# start, checked (ctest quickstart_c):
# 1. the ```c block after the line "<!-- quickstart: examples/NAME ... -->"
#    in README is FILE, byte for byte;
# 2. BINARY (FILE built as memgrad-quickstart) runs and exits 0: it trains
#    and exits 1 unless the measured peak equals the predicted one;
# 3. the "peak: ..." line it prints is the one the README quotes.
set -euo pipefail
readme=${1:?usage: run.sh README FILE BINARY}
file=${2:?usage: run.sh README FILE BINARY}
binary=${3:?usage: run.sh README FILE BINARY}
name=examples/$(basename "$file")
block=$(awk -v tag="<!-- quickstart: $name " '
    index($0, tag) == 1 { want = 1; next }
    want == 1 && $0 == "```c" { want = 2; next }
    want == 2 && $0 == "```" { found = 1; exit }
    want == 2 { print }
    END { exit !found }' "$readme") || {
    echo "quickstart: $readme has no \"<!-- quickstart: $name\" line followed by a \`\`\`c block" >&2
    exit 1
}
if ! diff -u <(printf '%s\n' "$block") "$file"; then
    echo "quickstart: the C quick start in $readme differs from $file (above: - README, + file); make them equal" >&2
    exit 1
fi
echo "quickstart: $readme's C quick start is $file ($(wc -l < "$file") lines)"
out=$("$binary") || { echo "$out"; echo "quickstart: $binary failed" >&2; exit 1; }
echo "$out"
if grep -Eq 'loss -?(nan|inf)' <<< "$out"; then
    echo "quickstart: the loss is not a number" >&2
    exit 1
fi
peak=$(grep '^peak: ' <<< "$out") || { echo "quickstart: no 'peak:' line" >&2; exit 1; }
if ! tr -s ' \n' '  ' < "$readme" | grep -qF "\`$peak\`"; then
    echo "quickstart: $readme does not quote the line the quick start prints: \`$peak\`" >&2
    exit 1
fi
echo "quickstart: $readme quotes its peak line"
