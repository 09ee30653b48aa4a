# bench/onnx/row.sh - sourced by run.sh and torch_run.sh: one model at one
# batch under one policy through memgrad-onnx, its plan and step output
# appended to the raw text file and one row appended to the CSV.
#
#   onnx_bench_header CSV
#   onnx_bench_row TOOL MODEL.onnx NAME BATCH POLICY TXT CSV WORKDIR

onnx_bench_header() {
    echo "model,batch,policy,checkpoints,predicted_peak_bytes,measured_peak_bytes,recompute_fraction,median_step_s,loss" >"$1"
}

onnx_bench_row() {
    local tool=$1 model=$2 name=$3 n=$4 p=$5 txt=$6 csv=$7 work=$8
    local plan="$tool plan $model --batch $n --policy $p"
    local cmd="$tool step $model --batch $n --policy $p --repeat 3"
    echo "\$ $plan" >>"$txt"
    $plan >"$work/plan.txt"
    cat "$work/plan.txt" >>"$txt"
    echo "\$ $cmd" >>"$txt"
    $cmd >"$work/step.txt"
    cat "$work/step.txt" >>"$txt"
    local nck frac loss step meas pred
    nck=$(sed -n 's/^  checkpoints: \([0-9]*\).*/\1/p' "$work/plan.txt")
    frac=$(sed -n 's/^  recompute fraction: \([0-9.]*\).*/\1/p' "$work/plan.txt")
    loss=$(sed -n 's/^loss //p' "$work/step.txt")
    step=$(sed -n 's/^median step \([0-9.]*\) s.*/\1/p' "$work/step.txt")
    meas=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\1/p' "$work/step.txt")
    pred=$(sed -n 's/^pool peak measured \([0-9]*\) bytes, predicted \([0-9]*\) bytes/\2/p' "$work/step.txt")
    echo "$name,$n,$p,$nck,$pred,$meas,$frac,$step,$loss" >>"$csv"
}
