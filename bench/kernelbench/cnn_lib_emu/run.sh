#!/usr/bin/env bash
# CPU checks of the level-3 CNN bundles (no GPU needed):
#  1. test.cpp: the exact source of the shared kernels (bundles/level3/_lib/cnn_*.cu) run on the CPU over
#     emu.hpp (CUDA threads as std::threads) against float64 references of PyTorch's definitions;
#  2. plan_sim.py (skip with SIM=0): every CNN bundle's plan run step by step on CPU buffers (views,
#     strides, repeats, conv shapes, gemm sizes as the plan says; convs and gemms through torch; each
#     cnn_* launch through a torch model of that kernel) against the task's Model in training mode,
#     on inputs smaller than the task's (the plans follow the input's size).
# Exit 0 when both pass. PYTHON: an interpreter with torch and PyYAML (default /usr/bin/python3).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${TMPDIR:-/tmp}/cnn_lib_emu.$$
trap 'rm -f "$BIN"' EXIT
${CXX:-g++} -std=c++20 -O1 -pthread -Wall -Wno-unused-variable -Wno-unused-function -o "$BIN" "$HERE/test.cpp"
"$BIN"
[ "${SIM:-1}" = 0 ] && exit 0
"${PYTHON:-/usr/bin/python3}" "$HERE/plan_sim.py" \
  4_LeNet5:8,1,32,32 5_AlexNet:2,3,224,224 8_ResNetBasicBlock:2,3,16,16 9_ResNet18:2,3,64,64 \
  10_ResNet101:4,3,128,128 11_VGG16:1,3,224,224 12_VGG19:1,3,224,224 13_DenseNet121TransitionLayer:4,32,16,16 \
  14_DenseNet121DenseBlock:2,32,16,16 15_DenseNet121:2,3,64,64 16_DenseNet201:2,3,64,64
