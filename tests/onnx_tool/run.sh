#!/usr/bin/env bash
# onnx_tool test: memgrad-onnx plan and step on the committed test models.
# step's gradients must be bit-equal under every policy, its loss must match
# between policies, its input and labels files must be read, and plan must
# print a section per policy and write the DOT file.
#
# usage: run.sh <memgrad-onnx> <tests/data>
set -euo pipefail
tool=$1
data=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/memgrad-onnx.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$tool" plan "$data/cnn.onnx" --batch 4 --dot "$tmp/cnn.dot" >"$tmp/plan.txt"
cat "$tmp/plan.txt"
for p in none memory speed; do
    grep -q "^policy $p$" "$tmp/plan.txt"
done
[ "$(grep -c 'predicted peak: [0-9]* bytes' "$tmp/plan.txt")" -eq 3 ]
[ "$(grep -c 'recompute fraction: [0-9.]*' "$tmp/plan.txt")" -eq 3 ]
grep -q digraph "$tmp/cnn.dot"

for model in mlp cnn; do
    batch=3
    [ "$model" = cnn ] && batch=2
    for p in none memory speed; do
        "$tool" step "$data/$model.onnx" --batch $batch --policy $p --repeat 2 \
            --input "$data/$model.input.bin" --save-grads "$tmp/$model.$p.bin" \
            >"$tmp/$model.$p.txt"
        cat "$tmp/$model.$p.txt"
        grep -q '^loss [-0-9.e]*$' "$tmp/$model.$p.txt"
        grep -q '^median step [0-9.]* s (2 steps)$' "$tmp/$model.$p.txt"
        grep -q '^pool peak measured [0-9]* bytes, predicted [0-9]* bytes$' "$tmp/$model.$p.txt"
    done
    cmp "$tmp/$model.none.bin" "$tmp/$model.memory.bin"
    cmp "$tmp/$model.none.bin" "$tmp/$model.speed.bin"
    [ "$(grep ^loss "$tmp/$model.none.txt")" = "$(grep ^loss "$tmp/$model.speed.txt")" ]
done
# the architecture blocks, on random data (token ids for gpt and bert);
# mobilenet's dropout is replayed on recompute
for model in gpt bert resnet mobilenet unet; do
    for p in none memory speed; do
        "$tool" step "$data/$model.onnx" --batch 2 --policy $p --repeat 2 \
            --save-grads "$tmp/$model.$p.bin" >"$tmp/$model.$p.txt"
        cat "$tmp/$model.$p.txt"
    done
    cmp "$tmp/$model.none.bin" "$tmp/$model.memory.bin"
    cmp "$tmp/$model.none.bin" "$tmp/$model.speed.bin"
done
plan_out=$("$tool" plan "$data/gpt.onnx" --batch 2 --policy memory)
grep -q '^policy memory$' <<<"$plan_out"

# token ids from an int32 file
"$tool" step "$data/gpt.onnx" --batch 2 --policy none --input "$data/gpt.input.bin" >"$tmp/gi.txt"
grep -q '^loss [0-9.]*$' "$tmp/gi.txt"

# the mlp's 4 initializers: 16*8 + 16 + 4*16 + 4 floats
[ "$(stat -c %s "$tmp/mlp.none.bin")" -eq $(( (128 + 16 + 64 + 4) * 4 )) ]

# --tensors keeps named values: h and r are [3, 16] f32 (the 16-wide hidden
# layer), r = relu(h); the gradients do not change
"$tool" step "$data/mlp.onnx" --batch 3 --policy memory --input "$data/mlp.input.bin" \
    --save-grads "$tmp/mlp.kept.bin" --tensors h,r --save-tensors "$tmp/hr.bin" >/dev/null
cmp "$tmp/mlp.none.bin" "$tmp/mlp.kept.bin"
[ "$(stat -c %s "$tmp/hr.bin")" -eq $(( 2 * 3 * 16 * 4 )) ]
python3 - "$tmp/hr.bin" <<'PY'
import struct, sys
v = struct.unpack("<96f", open(sys.argv[1], "rb").read())
h, r = v[:48], v[48:]
assert all(b == max(a, 0.0) for a, b in zip(h, r)), "r is not relu(h)"
assert any(a < 0 for a in h) and any(a > 0 for a in h), "h has one sign"
PY
for bad in "--tensors nope --save-tensors $tmp/x.bin" "--tensors h" "--tensors h,,r --save-tensors $tmp/x.bin"; do
    # shellcheck disable=SC2086
    if "$tool" step "$data/mlp.onnx" --batch 3 --policy none $bad 2>"$tmp/err.txt"; then
        echo "FAIL: memgrad-onnx accepted $bad" >&2
        exit 1
    fi
done
grep -q "bad name" "$tmp/err.txt"

# --tensors naming what is bound already fails with what it is, not late
# with "bound twice"; a name given twice fails as the arguments are parsed
# (before the model is read: the model path here does not exist)
expect_fail() { # <what the message must say> <args...>
    local want=$1
    shift
    if "$tool" "$@" 2>"$tmp/err.txt"; then
        echo "FAIL: memgrad-onnx accepted $*" >&2
        exit 1
    fi
    cat "$tmp/err.txt"
    if ! grep -q -- "$want" "$tmp/err.txt" || grep -q "bound twice" "$tmp/err.txt"; then
        echo "FAIL: expected '$want' for $*" >&2
        exit 1
    fi
}
step_mlp=(step "$data/mlp.onnx" --batch 3 --policy none --save-tensors "$tmp/x.bin")
expect_fail "'x' is an input" "${step_mlp[@]}" --tensors h,x
expect_fail "'w1' is a parameter" "${step_mlp[@]}" --tensors w1
expect_fail "'h' is named twice" step "$tmp/none.onnx" --batch 3 --policy none \
    --tensors h,r,h --save-tensors "$tmp/x.bin"
# nine policies: the count is the problem, not the ninth's name
expect_fail "more than 8 policies" plan "$data/mlp.onnx" --batch 3 \
    --policy none,none,none,none,none,none,none,none,none
# empty entries are refused, as memgrad-plan refuses them (one parser,
# tools/cli_policy.h): strtok skipped them and ran the rest (issue 49)
expect_fail "entry 2 is empty" plan "$data/mlp.onnx" --batch 3 --policy "memory,"
expect_fail "entry 2 is empty" plan "$data/mlp.onnx" --batch 3 --policy "none,,memory"
expect_fail "entry 1 is empty" plan "$data/mlp.onnx" --batch 3 --policy ","
expect_fail "one policy only" step "$data/mlp.onnx" --batch 3 --policy "none,memory"

# policy budget (--budget B: bytes, K/M/G, or a fraction of plain
# backprop's peak): gradients bit-equal to policy none's, the measured
# pool peak the predicted one, within the budget; a budget below the
# smallest that fits fails naming it, and that one fits; bad budgets are
# usage errors
"$tool" step "$data/mobilenet.onnx" --batch 2 --policy budget --budget 0.6x --repeat 2 \
    --save-grads "$tmp/mobilenet.budget.bin" >"$tmp/mobilenet.budget.txt"
cat "$tmp/mobilenet.budget.txt"
cmp "$tmp/mobilenet.none.bin" "$tmp/mobilenet.budget.bin"
plain=$(sed -n "s/^budget: 0.6 of plain backprop's \([0-9]*\) bytes = [0-9]* bytes$/\1/p" "$tmp/mobilenet.budget.txt")
budget=$(sed -n 's/^budget \([0-9]*\) bytes, budget peak \([0-9]*\) bytes: within$/\1/p' "$tmp/mobilenet.budget.txt")
bpeak=$(sed -n 's/^budget \([0-9]*\) bytes, budget peak \([0-9]*\) bytes: within$/\2/p' "$tmp/mobilenet.budget.txt")
[ -n "$plain" ] && [ "$budget" -eq $((plain * 6 / 10)) ] && [ "$bpeak" -le "$budget" ]
# step binds the loss and gradients: measured = predicted = budget peak
grep -q "^pool peak measured $bpeak bytes, predicted $bpeak bytes$" "$tmp/mobilenet.budget.txt"
"$tool" plan "$data/mobilenet.onnx" --batch 2 --policy none,budget --budget "$budget" >"$tmp/plan.budget.txt"
cat "$tmp/plan.budget.txt"
grep -q '^policy budget$' "$tmp/plan.budget.txt"
grep -q "^  budget $budget bytes, budget peak $bpeak bytes: within$" "$tmp/plan.budget.txt"
"$tool" step "$data/mlp.onnx" --batch 3 --policy budget --budget 2K >"$tmp/k.txt"
grep -q '^budget 2048 bytes, budget peak [0-9]* bytes: within$' "$tmp/k.txt"
if "$tool" step "$data/resnet.onnx" --batch 2 --policy budget --budget 0.3x 2>"$tmp/err.txt"; then
    echo "FAIL: resnet fitted 0.3 of plain backprop's peak" >&2
    exit 1
fi
min=$(sed -n 's/.*the smallest budget that fits is \([0-9]*\) bytes.*/\1/p' "$tmp/err.txt")
[ -n "$min" ]
"$tool" step "$data/resnet.onnx" --batch 2 --policy budget --budget "$min" --save-grads "$tmp/resnet.budget.bin" >"$tmp/min.txt"
grep -q "^budget $min bytes, budget peak $min bytes: within$" "$tmp/min.txt"
cmp "$tmp/resnet.none.bin" "$tmp/resnet.budget.bin"
for bad in 12Q 1.5 0 -3x 1e6 64KB; do
    expect_fail "is no budget" step "$data/mlp.onnx" --batch 3 --policy budget --budget "$bad"
done
expect_fail "policy budget needs --budget" plan "$data/mlp.onnx" --batch 3 --policy none,budget
expect_fail "goes with policy budget" step "$data/mlp.onnx" --batch 3 --policy memory --budget 1M

# --offload BW,RATE (issue 51): at 0.7x with copies cheap beside compute
# the budget policy offloads; gradients bit-equal to policy none's,
# device and host peaks measured = predicted, and plan lists the copies
"$tool" step "$data/resnet.onnx" --batch 8 --policy none --save-grads "$tmp/resnet8.none.bin" >/dev/null
"$tool" step "$data/resnet.onnx" --batch 8 --policy budget --budget 0.7x --offload 12e9,5e11 \
    --repeat 2 --save-grads "$tmp/resnet8.off.bin" >"$tmp/off.txt"
cat "$tmp/off.txt"
cmp "$tmp/resnet8.none.bin" "$tmp/resnet8.off.bin"
grep -q '^offloaded: [1-9][0-9]* tensors, [0-9]* bytes; host tier [0-9]* bytes (peak [0-9]*); copies beside [1-9][0-9]* steps' "$tmp/off.txt"
grep -q '^budget [0-9]* bytes, budget peak [0-9]* bytes: within$' "$tmp/off.txt"
hpeak=$(sed -n 's/^offloaded: .* (peak \([0-9]*\)); .*/\1/p' "$tmp/off.txt")
grep -q "^host tier peak measured $hpeak bytes, predicted $hpeak bytes$" "$tmp/off.txt"
ppeak=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted [0-9]* bytes$/\1/p' "$tmp/off.txt")
grep -q "^pool peak measured $ppeak bytes, predicted $ppeak bytes$" "$tmp/off.txt"
"$tool" plan "$data/resnet.onnx" --batch 8 --policy none,budget --budget 0.7x --offload 12e9,5e11 >"$tmp/offplan.txt"
cat "$tmp/offplan.txt"
[ "$(grep -c '^  offloaded: [1-9][0-9]* tensors' "$tmp/offplan.txt")" -eq 1 ]
expect_fail "goes with policy budget" step "$data/mlp.onnx" --batch 3 --policy memory --offload 12e9,5e11
for bad in 12e9 0,1 1,-1 a,b "1,2,3"; do
    expect_fail "is no pair of rates" step "$data/mlp.onnx" --batch 3 --policy budget --budget 0.9x --offload "$bad"
done

# labels from a file change the loss; a file of the wrong size is refused
printf '\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00' >"$tmp/labels.bin"
"$tool" step "$data/mlp.onnx" --batch 3 --policy none --input "$data/mlp.input.bin" \
    --labels "$tmp/labels.bin" >"$tmp/lab.txt"
! cmp -s <(grep ^loss "$tmp/lab.txt") <(grep ^loss "$tmp/mlp.none.txt")
if "$tool" step "$data/mlp.onnx" --batch 3 --policy none --labels "$data/mlp.onnx" 2>/dev/null; then
    echo "FAIL: a labels file of the wrong size was accepted" >&2
    exit 1
fi
if "$tool" step "$data/unsupported.onnx" --batch 2 --policy none 2>"$tmp/err.txt"; then
    echo "FAIL: an unsupported model ran" >&2
    exit 1
fi
grep -q Hardmax "$tmp/err.txt"
echo "onnx_tool: ok"
