#!/usr/bin/env bash
# install_consumer test: install an already built memgrad tree to a temporary
# prefix, then build tests/install_consumer/main.c against it twice, with
# CMake (find_package(memgrad)) and with plain cc + pkg-config --static, and
# check that both programs print "relu" (pkg-config with and without
# --static), having run a plan on the CPU and asked for a CUDA executor.
#
# usage: run.sh <build-dir> <source-dir>
# env (set by ctest): MG_CMAKE, MG_CC, MG_PKG_CONFIG, MG_CONFIG;
#                     MG_KEEP_TMP=1 keeps the temporary directory.
set -euo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 <build-dir> <source-dir>" >&2
    exit 2
fi
build_dir=$(cd "$1" && pwd)
src_dir=$(cd "$2" && pwd)
cmake_bin=${MG_CMAKE:-cmake}
cc_bin=${MG_CC:-cc}
pkg_config_bin=${MG_PKG_CONFIG:-pkg-config}
config=${MG_CONFIG:-}
expected="relu"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/memgrad-install.XXXXXX")
cleanup() {
    if [ "${MG_KEEP_TMP:-0}" = 1 ]; then
        echo "kept $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT

prefix="$tmp/prefix"
config_args=()
if [ -n "$config" ]; then
    config_args=(--config "$config")
fi

echo "== install $build_dir -> $prefix"
"$cmake_bin" --install "$build_dir" --prefix "$prefix" "${config_args[@]}"

check_output() { # <what> <program>
    local out
    out=$("$2")
    if [ "$out" != "$expected" ]; then
        echo "FAIL: $1 printed '$out', expected '$expected'" >&2
        exit 1
    fi
    echo "ok: $1 printed '$out'"
}

echo "== find_package(memgrad) consumer"
"$cmake_bin" -S "$src_dir/tests/install_consumer" -B "$tmp/build" \
    -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc_bin" \
    -DPKG_CONFIG_EXECUTABLE="$(command -v "$pkg_config_bin")" \
    -DCMAKE_BUILD_TYPE="${config:-Release}"
"$cmake_bin" --build "$tmp/build" "${config_args[@]}"
consumer=$(find "$tmp/build" -type f -name consumer -perm -u+x | head -n 1)
if [ -z "$consumer" ]; then
    echo "FAIL: the CMake consumer was not built" >&2
    exit 1
fi
check_output "cmake consumer" "$consumer"

echo "== pkg-config consumer"
# GNUInstallDirs picks lib, lib64 or lib/<multiarch> depending on the
# platform and the configured prefix: look for the .pc file.
pc_file=$(find "$prefix" -path '*/pkgconfig/memgrad.pc' | head -n 1)
if [ -z "$pc_file" ]; then
    echo "FAIL: memgrad.pc was not installed under $prefix" >&2
    exit 1
fi
pc_dir=$(dirname "$pc_file")
lib_dir=$(dirname "$pc_dir")
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# A shared libmemgrad has no rpath in these programs; point the loader at it.
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# As a user links: plain --libs (which must suffice when only the static
# library is installed), and --static.
for mode in "" --static; do
    flags=$("$pkg_config_bin" --cflags --libs $mode memgrad)
    echo "pkg-config --cflags --libs $mode memgrad: $flags"
    # shellcheck disable=SC2086 # the flags are meant to be split
    "$cc_bin" -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer-pc" \
        "$src_dir/tests/install_consumer/main.c" $flags
    check_output "pkg-config consumer (--libs $mode)" "$tmp/consumer-pc"
done

echo "install_consumer: all ok"
