#!/usr/bin/env bash
# CPU check of _lib/mb_bn.cu and _lib/mb_ew.cu: compiles kernel_emu.cpp (their exact source over
# bench/kernelbench/cnn_lib_emu/emu.hpp) and runs it. Exit 0 = every check passed.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${TMPDIR:-/tmp}/mb_kernel_emu.$$
trap 'rm -f "$BIN"' EXIT
${CXX:-g++} -std=c++20 -O1 -pthread -Wall -Wno-unused-variable -Wno-unused-function -o "$BIN" "$HERE/kernel_emu.cpp"
"$BIN"
