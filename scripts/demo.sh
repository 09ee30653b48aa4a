#!/usr/bin/env bash
# Install what is missing, build memgrad into build/ (the same build type as
# scripts/test.sh, so the two share one tree) and run the demo; arguments
# are passed to the demo.   usage: bash scripts/demo.sh [depth width batch steps]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target memgrad-demo
source scripts/blas-env.sh
exec build/memgrad-demo "$@"
