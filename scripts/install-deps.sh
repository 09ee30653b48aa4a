#!/usr/bin/env bash
# Install the Debian packages memgrad needs to build and test, skipping apt
# entirely when they are all present. Idempotent; quiet unless it installs.
#
#   build-essential cmake pkg-config     toolchain
#   libigraph-dev libopenblas-dev        libraries memgrad links
#   libopenblas-openmp-dev               OpenBLAS built on OpenMP, selected
#       below (update-alternatives, Debian's way of choosing a BLAS build)
#       unless MG_BLAS_FLAVOR=pthread: Debian's default pthreads build keeps
#       its own spinning worker pool, so memgrad's OpenMP loops stay on one
#       thread beside it (cpu_kernels.h, mgi_cpu_par); with the OpenMP build
#       OpenBLAS, oneDNN and memgrad's kernels share one pool and every
#       core works (bench/results/blas-flavor.txt: the ResNet step at 2
#       threads 97.9 -> 79.5 ms)
#   check (pulls libsubunit-dev)         unit tests
#   libglpk-dev libarpack2-dev libplfit-dev libgmp-dev libxml2-dev gfortran
#       libraries that `pkg-config --static igraph openblas` names
#       (igraph's and OpenBLAS's Libs.private); libigraph-dev does not
#       depend on them, and the install_consumer test links that way.
#   coinor-libcbc-dev                    COIN-OR CBC, the second solver of the
#                                        MILP references (mg-checkmate --solver
#                                        cbc, test_checkmate): it proves what
#                                        GLPK leaves open on branching DAGs
#   libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
#       oneDNN, the CPU convolutions; its CMake config (Debian builds it
#       with OpenCL) looks for the OpenCL headers and library, which
#       libdnnl-dev only recommends
#   libopenmpi-dev openmpi-bin           data-parallel training (memgrad_dist.h,
#                                        the MPI tests run under mpirun)
#   libprotobuf-c-dev protobuf-c-compiler libonnx-dev
#                                        ONNX import (memgrad_onnx.h): protobuf-c
#                                        and the onnx.proto it is generated from
#   libdlpack-dev                        dlpack.h (memgrad_dlpack.h)
#   python3-venv python3-numpy python3-torch
#                                        the Python package's tests (torch:
#                                        its DLPack and bridge tests)
#   python3-torchvision python3-onnx     the ONNX cross-check against PyTorch
#                                        (tests/onnx_torch_crosscheck.py)
#   valgrind                             scripts/icount.sh, the instruction-
#                                        count guard (callgrind)
#   clang libclang-rt-dev                the ONNX importer's libFuzzer harnesses
#                                        (scripts/fuzz-onnx.sh: clang's
#                                        -fsanitize=fuzzer runtime)
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    libigraph-dev libopenblas-dev libopenblas-openmp-dev
    check libsubunit-dev
    libglpk-dev libarpack2-dev libplfit-dev libgmp-dev libxml2-dev gfortran
    coinor-libcbc-dev
    libopenmpi-dev openmpi-bin
    libprotobuf-c-dev protobuf-c-compiler libonnx-dev
    libdlpack-dev python3-venv python3-numpy python3-torch
    python3-torchvision python3-onnx
    libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
    clang libclang-rt-dev valgrind
)

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "install ok installed" ]; then
        missing+=("$p")
    fi
done

# The OpenBLAS build (runtime library and the -dev link, whose slave is
# openblas.pc) that the alternatives system does not yet point at, if any.
flavor=${MG_BLAS_FLAVOR:-openmp}
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
to_select=()
# Every OpenBLAS link at once: a process that loads libblas.so.3 from one
# build and libopenblas.so.0 from the other (PyTorch loads both) has two
# thread pools, and PyTorch's float64 step hung that way at 2 threads.
for link in libopenblas.so.0 libopenblas.so libblas.so.3 libblas.so \
    liblapack.so.3 liblapack.so; do
    want=/usr/lib/$arch/openblas-$flavor/$link
    now=$(readlink -f "/etc/alternatives/$link-$arch" 2>/dev/null || true)
    if [ "$now" != "$(readlink -f "$want" 2>/dev/null || echo "$want")" ]; then
        to_select+=("$link-$arch=$want")
    fi
done

if [ "${#missing[@]}" -eq 0 ] && [ "${#to_select[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-deps.sh: missing packages: ${missing[*]}" >&2
    echo "install-deps.sh: OpenBLAS builds to select: ${to_select[*]}" >&2
    echo "install-deps.sh: not root and no sudo; install them and rerun" >&2
    exit 1
fi

if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for sel in "${to_select[@]}"; do
    name=${sel%%=*} path=${sel#*=}
    if [ -e "$path" ]; then
        echo "install-deps.sh: OpenBLAS's $flavor build for $name (update-alternatives)"
        "${as_root[@]}" update-alternatives --quiet --set "$name" "$path"
    fi
done
