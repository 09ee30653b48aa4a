#!/usr/bin/env bash
# Build memgrad in Release into build/ and run the demo; arguments are passed
# to the demo.   usage: bash scripts/demo.sh [demo args...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target memgrad-demo
exec build/memgrad-demo "$@"
