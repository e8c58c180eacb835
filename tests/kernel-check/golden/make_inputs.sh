#!/usr/bin/env bash
# Writes the golden cases' in.jsonl from the bundles (datasets/skill/bundles, tests/kernel-check/bundles)
# and make_candidate.py's edits. Run by hand when a bundle changes, then UPDATE_GOLDEN=1 golden.sh and
# review the diff; the suite itself reads the checked-in in.jsonl files, not this script.
set -euo pipefail
G=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$G/../../.." && pwd)
MK="python3 $SRC/tests/kernel-check/make_candidate.py"
B="$SRC/datasets/skill/bundles" TB="$SRC/tests/kernel-check/bundles"
w() { mkdir -p "$G/$1"; cat > "$G/$1/in.jsonl"; }

for b in "$B"/scale_add "$B"/row_softmax "$B"/linear_relu_gemm "$B"/linear_relu_tiled "$TB"/conv_bias "$TB"/two_outputs; do
  $MK "$b"
done | w good-bundles
( $MK "$B/scale_add"; $MK "$B/row_softmax" ) | w arch-sm80
# 200,000 bytes of dynamic shared memory: within sm_90's opt-in limit (232,448), over sm_80's (166,912)
# and sm_86's (101,376): the launch limits are the target arch's.
$MK "$B/scale_add" --plan-replace "block: [256]" "block: [256]
    shared: 200000" | w arch-shared

{
  $MK "$B/scale_add" --replace fused.cu "out[i] = a[i] * alpha + b[i];" "out[i] = a[i] * alpha + b[i]"
  $MK "$B/scale_add" --replace fused.cu "if (i < n)" "if (i < n && undefined_thing)"
  $MK "$TB/two_outputs" --replace k.cu "__global__" "__global__ int"
} | w compile-errors

{
  $MK "$B/scale_add" --plan-replace "N, 2.0]" "2.0]"
  $MK "$B/scale_add" --plan-replace "launch: scale_add" "launch: scale_sub"
  $MK "$B/scale_add" --plan-replace "N, 2.0]" "N, 2.0, 7]"
  $MK "$B/scale_add" --plan-replace "N, 2.0]" "N, 2]"
  $MK "$B/scale_add" --plan-replace "N, 2.0]" "2.0, N]"
  $MK "$B/scale_add" --plan-replace "args: [inputs.0," "args: [N,"
  $MK "$B/scale_add" --plan-replace "cdiv(N, 256)" "cdiv(M, 256)"
  $MK "$B/scale_add" --plan-replace "outputs.0, N" "inputs.0, N"
  $MK "$B/scale_add" --plan-replace "block: [256]" "block: [2048]"
  $MK "$B/scale_add" --plan-replace "args: [inputs.0," "args: [inputs.7,"
  $MK "$B/scale_add" --plan-replace "dims: {N: inputs.0.shape[0]}" "dims: {N: inputs.0.shape[0}"
  $MK "$B/scale_add" --plan-replace "launch: scale_add" "lunch: scale_add"
  $MK "$B/scale_add" --plan-replace "forward:" "fowrard:"
  $MK "$B/row_softmax" --plan-replace "softmax_rows<256>" "softmax_rows<float>"
  $MK "$B/linear_relu_gemm" --plan-replace "activation: relu" "activaton: relu"
  $MK "$B/scale_add" --no-task --plan-replace "block: [256]" "block: [32, 32, 2]"
  $MK "$B/scale_add" --no-task --plan-replace "grid: [cdiv(N, 256)]" "grid: [cdiv(N, 256)]
    shared: 300000"
  $MK "$B/scale_add" --plan-replace "N, 2.0]" "N, init.0]" --task-set init_inputs '[3]'
} | w plan-errors

{
  $MK "$B/scale_add" --replace fused.cu "if (i < n)" "long long t = clock64(); if (i < n + (t & 0))"
  $MK "$B/scale_add" --replace fused.cu "if (i < n)" 'unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); if (i < n + (t & 0))'
  $MK "$B/scale_add" --replace fused.cu "if (i < n)" 'if (i == 0) printf("hi\n"); if (i < n)'
  $MK "$B/scale_add" --replace fused.cu "if (i < n)" 'float* p = (float*)malloc(4); if (i < n)'
  $MK "$B/scale_add" --replace fused.cu "if (i < n)" '#define TICK clo##ck64
  long long t = TICK(); if (i < n + (t & 0))'
  $MK "$B/scale_add" --replace fused.cu "__global__" '#include <cstdio>
__global__'
  $MK "$B/scale_add" --replace fused.cu "__global__" '__device__ float big_state[1 << 20];
__global__' --replace fused.cu "if (i < n) out[i]" "big_state[i & 1023] = 1; if (i < n) out[i]"
  $MK "$B/scale_add" --plan-replace "forward:" "scratch:
  huge: {dtype: float32, shape: [N, 1024]}
forward:"
  # and three that are allowed: a CUDA header, a small module array, the rules' words in a comment
  $MK "$B/scale_add" --replace fused.cu "__global__" '#include <cuda_fp16.h>
__global__'
  $MK "$B/scale_add" --replace fused.cu "__global__" '__device__ float small_state[256];
__global__'
  $MK "$B/scale_add" --replace fused.cu "// out[i]" "// printf( clock64( in a comment is fine
// out[i]"
} | w policy-violations

{
  $MK "$B/linear_relu_gemm"
  $MK "$B/scale_add" --plan-replace "forward:" "forward:
  - launch: scale_add
    grid: [cdiv(N, 256)]
    block: [256]
    args: [inputs.0, inputs.1, outputs.0, N, 2.0]"
  $MK "$B/scale_add"
} | w policy-file

for i in 1 2 3; do
  $MK "$B/scale_add"; $MK "$B/row_softmax"; $MK "$B/scale_add" --replace fused.cu "b[i];" "b[i]"
done | w order-j3

printf '{"task_id":"t"}\nnot json\n' | w not-json
printf '{"task_id":"t"}\n{"task_id":"t2","bundle":{"kernels":{"a.cu":"__global__ void k() {}"}}}\n' | w missing-bundle
printf '{"task_id":"t"}\n' | w strict
$MK "$B/scale_add" | w bad-arch
