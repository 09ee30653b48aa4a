#!/usr/bin/env bash
# scripts/check-wheel.sh - install a memgrad wheel into a fresh virtual
# environment outside the repository and check it there (issue 48 item 3):
# scripts/wheel-check.py, run with no MEMGRAD_LIBRARY, no LD_LIBRARY_PATH,
# Python's isolated mode (-I: no PYTHONPATH, no user site, not the current
# directory), from a temporary directory, with the repository named as a
# place nothing may be loaded from.
#
#   bash scripts/check-wheel.sh WHEEL [--cuda]
#
# --cuda: also run the plan on the GPU through the wheel's CUDA module
#         (needs torch with CUDA in the environment: use MG_WHEEL_OFFLINE=1).
# env: PYTHON (default python3: the interpreter of the new environment),
#      MG_WHEEL_OFFLINE=1 (a machine that reaches no package index, as the
#      GPU machine: the environment sees the system's site-packages for
#      numpy and torch, and pip installs the wheel alone, --no-index
#      --no-deps).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
whl=$(realpath "${1:?usage: check-wheel.sh WHEEL [--cuda]}")
shift
py=$(command -v "${PYTHON:-python3}")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/memgrad-wheel-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The wheel and the check are copied out: the environment gets no path
# into the repository.
cp "$whl" "$tmp/"
cp "$repo/scripts/wheel-check.py" "$tmp/"

venv_args=()
pip_args=()
if [ "${MG_WHEEL_OFFLINE:-0}" = 1 ]; then
    venv_args=(--system-site-packages)
    pip_args=(--no-index --no-deps)
fi
"$py" -m venv "${venv_args[@]}" "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check \
    "${pip_args[@]}" "$tmp/$(basename "$whl")"
echo "check-wheel: $(basename "$whl") installed into a fresh environment ($("$tmp/venv/bin/python" -c 'import sys; print(sys.version.split()[0])'), $tmp/venv)"
cd "$tmp"
# A clean environment: only PATH and HOME, so no MEMGRAD_* or LD_* variable
# of this shell can help the installed package find anything.
env -i PATH="$tmp/venv/bin:/usr/bin:/bin" HOME="$tmp" \
    "$tmp/venv/bin/python" -I wheel-check.py --forbid "$repo" "$@"
