#!/usr/bin/env bash
# The documented limits are the checked ones (issue 33's bar), compile-only: for every limit SKILL.md,
# rules.yaml and kernel-check(1) state, a bundle just inside it binds and one just outside it is
# refused with a message that names the limit (and the step or field). Also the plan fields that
# used to be read loosely: flags that are not true or false, a float where a size goes, two
# spellings of one field, a scratch list, a key given twice, an integer argument its parameter
# cannot hold, a conv shape naming a dimension it does not have.
set -u
KC="$CA_BIN/kernel-check"
HERE=$(cd "$(dirname "$0")" && pwd)
B="$CA_SRC/datasets/skill/bundles"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache"
: > "$T/failures"
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1: $2"; echo "$1" >> "$T/failures"; }
field() { python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); v=r.get('check',{}).get(sys.argv[2]); print(json.dumps(v) if not isinstance(v,str) else v)" "$1" "$2"; }

# case NAME STATUS SUBSTRING BUNDLE [make_candidate.py args...]: compile-only on sm_90 (ARCH overrides).
case_() {
  local name=$1 status=$2 sub=$3 bundle=$4; shift 4
  if ! python3 "$HERE/make_candidate.py" "$B/$bundle" "$@" > "$T/rec.jsonl" 2> "$T/mk.txt"; then
    fail "$name" "make_candidate: $(cat "$T/mk.txt")"; return
  fi
  if [ -n "${PLAN_FILE:-}" ]; then  # a plan too long for one argument (128 KiB)
    python3 -c "
import json, sys
r = json.loads(open(sys.argv[1]).read()); r['bundle']['plan'] = open(sys.argv[2]).read()
open(sys.argv[1], 'w').write(json.dumps(r) + '\n')" "$T/rec.jsonl" "$PLAN_FILE"
  fi
  "$KC" --compile-only --arch "${ARCH:-sm_90}" --no-store < "$T/rec.jsonl" > "$T/out.jsonl" 2> "$T/err.txt"
  local rc=$? got reason
  if [ $rc -ne 0 ]; then fail "$name" "exit $rc: $(tail -2 "$T/err.txt")"; return; fi
  got=$(field "$T/out.jsonl" status)
  reason=$(field "$T/out.jsonl" reason)
  if [ "$got" != "$status" ]; then fail "$name" "status $got, expected $status ($reason)"; return; fi
  case "$reason" in *"$sub"*) pass "$name: ${reason:0:160}" ;; *) fail "$name" "reason '$reason' lacks '$sub'" ;; esac
}
ok() { local name=$1 bundle=$2; shift 2; case_ "$name" compiled "plan and rules checks passed" "$bundle" "$@"; }
plan_error() { case_ "$1" plan_error "$2" "${@:3}"; }
violation() { case_ "$1" policy_violation "$2" "${@:3}"; }

SA=(--plan-replace "grid: [cdiv(N, 256)]")        # scale_add's grid, to be followed by its replacement
BL=(--plan-replace "block: [256]")
ARGS=(--plan-replace "outputs.0, N, 2.0]")
FWD=(--plan-replace "forward:")
DIMS=(--plan-replace "dims: {N: inputs.0.shape[0]}")

# --- launch sizes (SKILL.md Limits; kernel-check(1) launch) ---
ok "block 1024" scale_add "${BL[@]}" "block: [1024]"
plan_error "block 1025" "forward step 1 (line 3) 'launch scale_add': block[0] = 1025 (sm_90 allows 1 to 1024)" scale_add "${BL[@]}" "block: [1025]"
ok "block z 64" scale_add "${BL[@]}" "block: [1, 1, 64]"
plan_error "block z 65" "block[2] = 65 (sm_90 allows 1 to 64)" scale_add "${BL[@]}" "block: [1, 1, 65]"
ok "1024 threads" scale_add "${BL[@]}" "block: [32, 32, 1]"
plan_error "2048 threads" "block has 2048 threads (sm_90 allows at most 1024 per block)" scale_add "${BL[@]}" "block: [32, 32, 2]"
ok "grid x 2^31-1" scale_add "${SA[@]}" "grid: [2147483647]"
plan_error "grid x 2^31" "grid[0] = 2147483648 (sm_90 allows 1 to 2147483647)" scale_add "${SA[@]}" "grid: [2147483648]"
ok "grid y, z 65535" scale_add "${SA[@]}" "grid: [1, 65535, 65535]"
plan_error "grid y 65536" "grid[1] = 65536 (sm_90 allows 1 to 65535)" scale_add "${SA[@]}" "grid: [1, 65536]"
ok "shared 232448 (sm_90)" scale_add "${BL[@]}" $'block: [256]\n    shared: 232448'
plan_error "shared 232449 (sm_90)" "shared = 232449 bytes (sm_90 allows at most 232448" scale_add "${BL[@]}" $'block: [256]\n    shared: 232449'
ARCH=sm_80 ok "shared 166912 (sm_80)" scale_add "${BL[@]}" $'block: [256]\n    shared: 166912'
ARCH=sm_80 plan_error "shared 166913 (sm_80)" "sm_80 allows at most 166912" scale_add "${BL[@]}" $'block: [256]\n    shared: 166913'
ARCH=sm_89 plan_error "shared 101377 (sm_89)" "sm_89 allows at most 101376" scale_add "${BL[@]}" $'block: [256]\n    shared: 101377'
plan_error "shared is a size, not 2.5" "shared (dynamic shared memory bytes) must be an integer" scale_add "${BL[@]}" $'block: [256]\n    shared: 2.5'
# Static __shared__ and dynamic together (the kernel's 48 KiB static, as ptxas counts it with the 1 KiB reserved).
BIG='__global__ void big(float* p) { __shared__ float s[12288]; s[threadIdx.x] = p[threadIdx.x]; __syncthreads(); p[threadIdx.x] = s[(threadIdx.x + 1) % 12288]; }'
big_plan() { printf 'forward:\n  - launch: big\n    grid: [1]\n    block: [256]\n    shared: %s\n    args: [outputs.0]' "$1"; }
ok "static 48 KiB + dynamic to the limit" scale_add --add-file big.cu "$BIG" "${FWD[@]}" "$(big_plan '232448 - 49152')"
plan_error "static 48 KiB + dynamic past the limit" "both together" scale_add --add-file big.cu "$BIG" "${FWD[@]}" "$(big_plan '232448 - 49152 + 1025')"
# Clusters: at most 16 blocks, each dimension dividing the grid's.
ok "cluster of 16" row_sum_cluster --plan-replace "grid: [ROWS * 8]" "grid: [ROWS * 16]" --plan-replace "cluster: [8]" "cluster: [16]"
plan_error "cluster of 32" "a cluster of 32 blocks (at most 16 on sm_90)" row_sum_cluster --plan-replace "grid: [ROWS * 8]" "grid: [ROWS * 32]" --plan-replace "cluster: [8]" "cluster: [32]"
plan_error "cluster not dividing the grid" "cluster[0] = 3 must be at least 1 and divide grid[0]" row_sum_cluster --plan-replace "cluster: [8]" "cluster: [3]"
ARCH=sm_80 plan_error "cluster before sm_90" "thread block clusters need sm_90 or newer (sm_80)" scale_add "${BL[@]}" $'block: [256]\n    cluster: [1]'

# --- steps per call, repeats (rules max_forward_steps, max_init_steps; nesting 8) ---
rep_plan() { printf 'dims: {N: inputs.0.shape[0]}\nforward:\n  - repeat: %s\n    steps:\n      - launch: scale_add\n        grid: [cdiv(N, 256)]\n        block: [256]\n        args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n' "$1"; }
PLAN=$(cat "$B/scale_add/plan.yaml")
ok "16384 forward steps" scale_add --plan-replace "$PLAN" "$(rep_plan 16384)"
violation "16385 forward steps" "max_forward_steps: forward runs 16385 steps per call once its repeats are unrolled, the rules allow 16384" scale_add --plan-replace "$PLAN" "$(rep_plan 16385)"
plan_error "a repeat past the binder's bound names the rules" "the rules allow fewer: max_forward_steps" scale_add --plan-replace "$PLAN" "$(rep_plan 100001)"
init_plan() { printf 'dims: {N: inputs.0.shape[0]}\nscratch:\n  t: {dtype: float32, shape: [16]}\ninit:\n  - repeat: %s\n    steps:\n      - launch: scale_add\n        grid: [1]\n        block: [16]\n        args: [scratch.t, scratch.t, scratch.t, 16, 2.0]\nforward:\n  - launch: scale_add\n    grid: [cdiv(N, 256)]\n    block: [256]\n    args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n' "$1"; }
ok "4096 init steps" scale_add --plan-replace "$PLAN" "$(init_plan 4096)"
violation "4097 init steps" "max_init_steps: init runs 4097 steps" scale_add --plan-replace "$PLAN" "$(init_plan 4097)"
nest_plan() { python3 -c "
import sys
d = int(sys.argv[1]); s = 'dims: {N: inputs.0.shape[0]}\nforward:\n'; ind = '  '
for i in range(d):
    s += ind + '- repeat: 1\n' + ind + '  index: i%d\n' % i + ind + '  steps:\n'; ind += '    '
s += ind + '- launch: scale_add\n' + ind + '  grid: [cdiv(N, 256)]\n' + ind + '  block: [256]\n' + ind + '  args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n'
print(s)" "$1"; }
ok "repeats 8 deep" scale_add --plan-replace "$PLAN" "$(nest_plan 8)"
plan_error "repeats 9 deep" "repeat nested more than 8 deep" scale_add --plan-replace "$PLAN" "$(nest_plan 9)"

# --- scratch: rank 1 to 8, the cap (rules max_scratch_ratio, scratch_peak_factor, slack) ---
scratch() { printf 'dims: {N: inputs.0.shape[0]}\nscratch:\n  z: {dtype: %s, shape: [%s]}' "$1" "$2"; }
ok "scratch of rank 8" scale_add "${DIMS[@]}" "$(scratch float32 '1, 1, 1, 1, 1, 1, 1, 1')"
plan_error "scratch of rank 9" "scratch.z: shape has 9 dimensions (1 to 8)" scale_add "${DIMS[@]}" "$(scratch float32 '1, 1, 1, 1, 1, 1, 1, 1, 1')"
# scale_add's task: 12 MiB of inputs and outputs, no peak: 4 x 12 MiB + 16 MiB = 64 MiB.
ok "scratch at the io cap" scale_add "${DIMS[@]}" "$(scratch uint8 67108864)"
violation "scratch past the io cap" "max_scratch_ratio: scratch buffers total 67108865 bytes, the rules allow 67108864" scale_add "${DIMS[@]}" "$(scratch uint8 67108865)"
ok "scratch at the peak cap" scale_add "${DIMS[@]}" "$(scratch uint8 216777216)" --task-set reference '{"peak_bytes": 100000000}'
violation "scratch past the peak cap" "scratch_peak_factor: scratch buffers total 216777217 bytes, the rules allow 216777216" scale_add "${DIMS[@]}" "$(scratch uint8 216777217)" --task-set reference '{"peak_bytes": 100000000}'
plan_error "scratch as a list" "plan: scratch must be a map of NAME: {dtype, shape} (got a list)" scale_add "${DIMS[@]}" $'dims: {N: inputs.0.shape[0]}\nscratch:\n  - z: {dtype: float32, shape: [4]}'
plan_error "unknown scratch dtype" "unknown dtype 'complex64' (float32, float16, bfloat16" scale_add "${DIMS[@]}" "$(scratch complex64 4)"

# --- module memory (max_module_global_bytes), local memory (max_stack_bytes) ---
ok "64 KiB of module memory" scale_add --add-file g.cu '__device__ char buf[65536]; __global__ void g(int i) { buf[i] = 1; }'
violation "64 KiB + 1 of module memory" "max_module_global_bytes: module-scope __device__ and __constant__ memory is 65537 bytes" scale_add --add-file g.cu '__device__ char buf[65536]; __constant__ char c1[1]; __global__ void g(int i) { buf[i] = c1[i]; }'
ok "8 KiB stack" scale_add --add-file s.cu '__global__ void s(int* p, int i) { volatile int a[2048]; a[i] = 1; p[0] = a[p[1]]; }'
violation "8 KiB + 8 stack" "max_stack_bytes: function s(int*, int) needs 8200 bytes" scale_add --add-file s.cu '__global__ void s(int* p, int i) { volatile int a[2049]; a[i] = 1; p[0] = a[p[1]]; }'

# --- bundle files: plain relative names, up to 200 characters ---
N197=$(printf 'a%.0s' $(seq 197)); N198=$(printf 'a%.0s' $(seq 198))
ok "a 200-character file name" scale_add --add-file "$N197.cu" '__global__ void f(int* p) { p[0] = 1; }'
case_ "a 201-character file name" compile_error "longer than 200 characters" scale_add --add-file "$N198.cu" '__global__ void f(int* p) { p[0] = 1; }'

# --- plan text: 1 MiB, 100,000 values, 64 deep ---
pad_plan() { python3 -c "
import sys; b = open(sys.argv[1]).read(); n = (1 << 20) - len(b) + int(sys.argv[2])
print(b + '#' * n, end='')" "$B/scale_add/plan.yaml" "$1" > "$T/plan.yaml"; }
pad_plan 0; PLAN_FILE="$T/plan.yaml" ok "a plan of 1 MiB" scale_add
pad_plan 1; PLAN_FILE="$T/plan.yaml" plan_error "a plan of 1 MiB + 1" "1048577 bytes of text, over the 1048576 a plan may have (limit: plan size)" scale_add
values_plan() { python3 -c "
import sys; b = open(sys.argv[1]).read(); n = int(sys.argv[2])
print(b.replace('forward:', 'scratch:\n  z: {dtype: float32, shape: [' + ', '.join(['1'] * n) + ']}\nforward:'), end='')" "$B/scale_add/plan.yaml" "$1" > "$T/plan.yaml"; }
# scale_add's plan and the scratch map hold 20 values (maps, lists and scalars: 14 of the plan, 6 of
# z, its map, dtype, shape and their values): a shape of 99,980 is 100,000 values, refused by the rank.
values_plan 99980; PLAN_FILE="$T/plan.yaml" plan_error "100,000 values" "scratch.z: shape has 99980 dimensions (1 to 8)" scale_add
values_plan 99981; PLAN_FILE="$T/plan.yaml" plan_error "100,001 values" "more than 100000 values (YAML aliases are counted at every use): refused (limit: plan nodes)" scale_add

# --- fields read strictly (each used to be read loosely, silently) ---
plan_error "a flag that is not true or false" "forward step 1 (line 7) 'launch l1_normalize<512>' cooperative: expected true or false, got \"ture\"" global_l1_norm_coop --plan-replace "cooperative: true" "cooperative: ture"
ok "a flag spelled yes" global_l1_norm_coop --plan-replace "cooperative: true" "cooperative: yes"
plan_error "trans_b misspelled" "gemm trans_b: expected true or false" linear_relu_gemm --plan-replace "trans_b: true" "trans_b: ture"
ok "gemm alpha as an expression" linear_relu_gemm --plan-replace "activation: relu" "alpha: 1.0 / sqrt(inputs.0.shape[1])"
plan_error "gemm alpha not finite" "alpha = 1e+300 ('1e300'): not a finite float" linear_relu_gemm --plan-replace "activation: relu" "alpha: 1e300"
plan_error "gemm m of 2.5" "gemm m '2.5' is not an integer" linear_relu_gemm --plan-replace "activation: relu" "m: 2.5"
plan_error "activation and epilogue" "'activation' and 'epilogue' are one field" linear_relu_gemm --plan-replace "activation: relu" $'activation: relu\n      epilogue: none'
plan_error "shared and smem" "'shared' and 'smem' are one field" scale_add "${BL[@]}" $'block: [256]\n    shared: 16\n    smem: 999999'
plan_error "a key given twice" "key 'grid' appears twice in one map (line 6)" scale_add "${BL[@]}" $'block: [256]\n    grid: [1]'
plan_error "an int argument past int" "argument 4 ('4294967297') = 4294967297: does not fit the kernel's int" scale_add "${ARGS[@]}" "outputs.0, 4294967297, 2.0]"
ok "an int argument at INT_MIN" scale_add "${ARGS[@]}" "outputs.0, -2147483648, 2.0]"
plan_error "a float argument past float" "not a finite float" scale_add "${ARGS[@]}" "outputs.0, N, 1e300]"
plan_error "a conv on views without its shape" "a conv on views needs its shape" inception_concat_views --plan-replace ", shape: {n: 1, c: C, h: H, w: W, k: K1, r: 1, s: 1}}" "}"
ok "the same conv on views with its shape" inception_concat_views
plan_error "a conv shape with t and no d" "d is missing" concat_strided --plan-replace "h: H, w: W, k: K3, r: 3, s: 3}" "h: H, w: W, k: K3, r: 3, s: 3, t: 1}"
plan_error "a field's error inside a repeat names its path" "forward step 3.1 (line 20): unknown key 'blocks' (did you mean 'block'?)" rnn_recurrence --plan-replace "block: [128]
        args: [\"scratch.xw[t" "blocks: [128]
        args: [\"scratch.xw[t"
plan_error "conv transposed misspelled" "conv transposed: expected true or false" concat_strided --plan-replace "padding: 1, out" "padding: 1, transposed: nope, out"

n=$(wc -l < "$T/failures")
echo "documented limits: $n failure(s)"
[ "$n" -eq 0 ]
