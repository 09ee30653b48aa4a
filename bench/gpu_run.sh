#!/usr/bin/env bash
# bench/gpu_run.sh - everything issue 5 still needs from a machine with an
# NVIDIA GPU (H100/H200, sm_90, CUDA 12.x/13), in one command:
#
#   bash bench/gpu_run.sh            # from anywhere; needs cmake, nvcc, the
#                                    # library's deps (scripts/install-deps.sh)
#
# It builds a Release tree with the CUDA backend, runs the whole ctest suite,
# runs tests/test_cuda verbosely (every op forward and backward against the
# CPU, checkpointed == plain gradients bit for bit, pool peak == prediction,
# 1000 steps without growth, clean out-of-memory and bad-label errors), then
# mg-bench depth --device cuda (mlp to depth 1024, resnet to 128) and
# the PyTorch comparison on the GPU (compare_torch.py --device cuda); with
# 2+ GPUs and NCCL, test_dist_nccl under mpirun -np 2. Logs go to bench/results/gpu-<date>/ with nvidia-smi's
# output; commit that folder. Exit status: 0 only if the build, ctest and
# test_cuda all passed on a real device.
#
# env: MG_BUILD_DIR (default build-gpu), CUDAARCHS (default 90),
#      MG_GPU_SANITIZE=1 also runs test_cuda under compute-sanitizer,
#      PYTHON (default python3: one whose torch has CUDA),
#      MG_GPU_MLP_BATCH/WIDTH (2048/512), MG_GPU_RESNET_BATCH/WIDTH (256/16).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

stamp=$(date +%Y%m%d-%H%M%S)
out="bench/results/gpu-$stamp"
build=${MG_BUILD_DIR:-build-gpu}
arch=${CUDAARCHS:-90}
jobs=$(nproc 2>/dev/null || echo 4)
mkdir -p "$out"
exec > >(tee -a "$out/run.log") 2>&1

status=0
step() { echo; echo "== $*"; }
fail() { echo "FAIL: $*"; status=1; }

step "machine"
date -u +%Y-%m-%dT%H:%M:%SZ
uname -a
git rev-parse HEAD 2>/dev/null && git status --short | head -20
nvidia-smi | tee "$out/nvidia-smi.txt" || fail "nvidia-smi failed: no driver or no GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
    --format=csv | tee "$out/gpu.csv"
nvcc --version | tee "$out/nvcc.txt" || fail "nvcc not found"

step "configure and build ($build, CUDA architectures $arch)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" 2>&1 | tee "$out/configure.log"
grep -q "memgrad: CUDA backend ON" "$out/configure.log" ||
    fail "CMake did not enable the CUDA backend (see configure.log)"
if ! cmake --build "$build" -j"$jobs" > "$out/build.log" 2>&1; then
    tail -50 "$out/build.log"
    fail "build failed (see build.log)"
    exit 1
fi

step "ctest (every test, the GPU one included)"
ctest --test-dir "$build" --output-on-failure -j"$jobs" 2>&1 |
    tee "$out/ctest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "ctest failed"

step "test_cuda, verbose"
CK_VERBOSITY=verbose "$build/test_cuda" 2>&1 | tee "$out/test_cuda.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "test_cuda failed"
if grep -q "skipped: no CUDA device" "$out/test_cuda.log"; then
    fail "test_cuda found no CUDA device: the GPU tests did not run"
fi

# The NCCL transport of memgrad_dist (issue 16): 2 ranks, one GPU each.
# On a machine with one GPU it can only skip (NCCL takes one GPU per rank):
# that is reported, not failed.
if [ -x "$build/test_dist_nccl" ]; then
    step "test_dist_nccl (NCCL, mpirun -np 2, needs 2 GPUs)"
    mpirun --allow-run-as-root --oversubscribe -np 2 "$build/test_dist_nccl" \
        2>&1 | tee "$out/test_dist_nccl.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "test_dist_nccl failed"
    if grep -q "skipped:" "$out/test_dist_nccl.log"; then
        echo "NOTE: test_dist_nccl did not run on GPUs (see its skipped: line)"
    fi
fi

if [ "${MG_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    step "test_cuda under compute-sanitizer (memcheck)"
    compute-sanitizer --tool memcheck --leak-check full "$build/test_cuda" \
        > "$out/test_cuda_memcheck.log" 2>&1 || fail "compute-sanitizer found errors"
    tail -5 "$out/test_cuda_memcheck.log"
fi

step "mg-bench on the GPU"
# mlp to depth 1024 and resnet to depth 128, batches larger than on the
# CPU (bench/results/README.md) so that the GPU has work; every case must
# fit --max-bytes (default: half of the GPU's memory) or is refused.
MLP_GPU="--model mlp --depths 8,16,32,64,128,256,512,1024 --batch ${MG_GPU_MLP_BATCH:-2048} --width ${MG_GPU_MLP_WIDTH:-512}"
RESNET_GPU="--model resnet --depths 4,8,16,32,64,128 --batch ${MG_GPU_RESNET_BATCH:-256} --width ${MG_GPU_RESNET_WIDTH:-16}"
if [ -x "$build/mg-bench" ] && "$build/mg-bench" --help 2>&1 | grep -q -- "--device"; then
    for m in mlp resnet; do
        if [ "$m" = mlp ]; then args=$MLP_GPU; else args=$RESNET_GPU; fi
        # shellcheck disable=SC2086
        "$build/mg-bench" depth $args --policy none,memory,speed,collection \
            --repeat 5 --device cuda --csv "$out/depth-$m-cuda.csv" \
            > "$out/depth-$m-cuda.txt" 2> "$out/depth-$m-cuda.log"
        rc=$?
        cat "$out/depth-$m-cuda.txt"
        [ "$rc" -eq 0 ] || { tail -20 "$out/depth-$m-cuda.log"; fail "mg-bench depth --model $m --device cuda failed"; }
        grep "measured peak" "$out/depth-$m-cuda.log" &&
            fail "mg-bench depth --model $m: a measured pool peak differs from the plan's prediction"
    done
    # The same mlp sweep on this machine's CPU, for the GPU/CPU ratio
    # (shallower: the CPU is slower).
    "$build/mg-bench" depth --model mlp --depths 8,64,256 --policy none,memory \
        --repeat 3 --csv "$out/depth-mlp-cpu.csv" > "$out/depth-mlp-cpu.txt" \
        2> "$out/depth-mlp-cpu.log" ||
        echo "note: mg-bench on the CPU failed (see depth-mlp-cpu.log)"
else
    echo "not run: mg-bench has no --device option; rerun this script once" \
         "it does" | tee "$out/depth-cuda.log"
fi

step "PyTorch comparison on the GPU"
py=${PYTHON:-python3}
if grep -q -- "--device" bench/compare_torch.py 2>/dev/null &&
   "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' |
        tee "$out/torch.txt"
    "$py" bench/compare_torch.py --device cuda --mg-bench "$build/mg-bench" \
        --model mlp --depths 64,256,1024 --batch "${MG_GPU_MLP_BATCH:-2048}" \
        --width "${MG_GPU_MLP_WIDTH:-512}" --repeat 5 \
        --csv "$out/torch-cuda.csv" 2>&1 | tee "$out/torch-cuda-mlp.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "compare_torch.py --device cuda --model mlp failed"
    "$py" bench/compare_torch.py --device cuda --mg-bench "$build/mg-bench" \
        --model resnet --depths 8,32,128 --batch "${MG_GPU_RESNET_BATCH:-256}" \
        --width "${MG_GPU_RESNET_WIDTH:-16}" --repeat 5 --append \
        --csv "$out/torch-cuda.csv" 2>&1 | tee "$out/torch-cuda-resnet.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "compare_torch.py --device cuda --model resnet failed"
else
    echo "not run: bench/compare_torch.py has no --device option or $py's" \
         "torch has no CUDA here (set PYTHON= to a python with CUDA torch)" |
        tee "$out/torch-cuda.log"
fi

step "summary"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
if [ "$status" -eq 0 ]; then
    echo "gpu_run: all passed; logs in $out"
else
    echo "gpu_run: FAILURES; logs in $out"
fi
exit "$status"
