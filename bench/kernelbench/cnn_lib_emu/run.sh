#!/usr/bin/env bash
# CPU check of the shared level-3 CNN kernels (bundles/level3/_lib/cnn_*.cu): compiles test.cpp, which
# includes their exact source over emu.hpp (CUDA threads as std::threads), and runs it. Exit 0 = pass.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${TMPDIR:-/tmp}/cnn_lib_emu.$$
trap 'rm -f "$BIN"' EXIT
${CXX:-g++} -std=c++20 -O1 -pthread -Wall -Wno-unused-variable -Wno-unused-function -o "$BIN" "$HERE/test.cpp"
"$BIN"
