#!/usr/bin/env bash
# Install the Debian packages memgrad needs to build and test, skipping apt
# entirely when they are all present. Idempotent; quiet unless it installs.
#
#   build-essential cmake pkg-config     toolchain
#   libigraph-dev libopenblas-dev        libraries memgrad links
#   check (pulls libsubunit-dev)         unit tests
#   libglpk-dev libarpack2-dev libplfit-dev libgmp-dev libxml2-dev gfortran
#       libraries that `pkg-config --static igraph openblas` names
#       (igraph's and OpenBLAS's Libs.private); libigraph-dev does not
#       depend on them, and the install_consumer test links that way.
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
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    libigraph-dev libopenblas-dev
    check libsubunit-dev
    libglpk-dev libarpack2-dev libplfit-dev libgmp-dev libxml2-dev gfortran
    libopenmpi-dev openmpi-bin
    libprotobuf-c-dev protobuf-c-compiler libonnx-dev
    libdlpack-dev python3-venv python3-numpy python3-torch
    libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
)

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "install ok installed" ]; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-deps.sh: missing packages: ${missing[*]}" >&2
    echo "install-deps.sh: not root and no sudo; install them and rerun" >&2
    exit 1
fi

echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
