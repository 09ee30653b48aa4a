#!/usr/bin/env bash
# Install what the bench tools need beyond the library's own dependencies
# (scripts/install-deps.sh): gnuplot for bench/plot and Debian's PyTorch for
# bench/compare_torch.py. Not part of scripts/test.sh: the tests do not need
# them. Idempotent; quiet unless it installs.   usage: bash bench/setup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh

packages=(gnuplot-nox python3-torch python3-numpy)
missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "bench/setup.sh: missing packages: ${missing[*]}; not root and no sudo" >&2
    exit 1
fi
echo "bench/setup.sh: installing ${missing[*]}"
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
