#!/usr/bin/env bash
# kernel-check on a machine without a GPU: compile-only verdicts (good bundle, syntax error, every
# plan error, every policy rule), the no_device exit, the cubin cache, bad input, and the schema.
set -u
KC="$CA_BIN/kernel-check"
HERE=$(cd "$(dirname "$0")" && pwd)  # CA_TESTS is this folder under ctest, tests/ by hand: use our own
MK="python3 $HERE/make_candidate.py"
B="$CA_SRC/datasets/skill/bundles"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache"
pass() { echo "ok   $1"; }
# Failures go to a file: `... | expect` runs in a subshell, where a counter would be lost.
fail() { echo "FAIL $1: $2"; echo "$1" >> "$T/failures"; }
: > "$T/failures"

# field FILE KEY: check.KEY of the first record (python, any python3).
field() { python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); v=r.get('check',{}).get(sys.argv[2]); print(json.dumps(v) if not isinstance(v,str) else v)" "$1" "$2"; }

# expect NAME STATUS SUBSTRING [kernel-check args...] < candidate
expect() {
  local name=$1 status=$2 sub=$3; shift 3
  "$KC" --compile-only --arch sm_90 --no-store "$@" > "$T/out.jsonl" 2> "$T/err.txt"
  local rc=$?
  local got reason
  got=$(field "$T/out.jsonl" status)
  reason=$(field "$T/out.jsonl" reason)
  if [ $rc -ne 0 ]; then fail "$name" "exit $rc: $(tail -2 "$T/err.txt")"; return; fi
  if [ "$got" != "$status" ]; then fail "$name" "status $got, expected $status ($reason)"; return; fi
  case "$reason" in *"$sub"*) pass "$name: $reason" ;; *) fail "$name" "reason '$reason' lacks '$sub'" ;; esac
  cat "$T/out.jsonl" >> "$T/all.jsonl"
}

# 1. The bar: the DESIGN.md §3 example compiles.
$MK "$B/scale_add" > "$T/good.jsonl"
expect "design example compiles" compiled "compile-only" < "$T/good.jsonl"
[ "$(field "$T/out.jsonl" compiled)" = "true" ] && pass "compiled=true" || fail "compiled" "$(field "$T/out.jsonl" compiled)"
[ "$(field "$T/out.jsonl" compile_warnings)" = "null" ] && pass "no compile_warnings on a clean compile" || fail "clean compile_warnings" "$(field "$T/out.jsonl" compile_warnings)"
ms=$(field "$T/out.jsonl" compile_ms)
python3 -c "import sys; assert float(sys.argv[1]) > 0" "$ms" && pass "compile_ms=$ms" || fail "compile_ms" "$ms"
[ "$(field "$T/out.jsonl" cached)" = "false" ] && pass "first compile not cached" || fail "cached" "first compile cached"
python3 -c "
import json,sys; r=json.loads(open(sys.argv[1]).readline())['check']
k=r['resources']['kernels']['scale_add']; assert k['registers']>0, k; assert r['precision']=='fp32', r['precision']
assert r['resources']['module_global_bytes']==0" "$T/out.jsonl" && pass "resources and precision" || fail "resources" "$(field "$T/out.jsonl" resources)"

# 2. The cache: the same bundle again is a hit; a damaged entry is recompiled.
expect "second compile" compiled "" < "$T/good.jsonl"
[ "$(field "$T/out.jsonl" cached)" = "true" ] && pass "cache hit" || fail "cache" "second compile not cached"
n=$(find "$T/cache" -name '*.json' | wc -l)
[ "$n" -eq 1 ] && pass "one cache entry" || fail "cache entries" "$n"
find "$T/cache" -name '*.json' -exec sh -c 'echo "{not json" > "$1"' _ {} \;
expect "damaged cache entry" compiled "" < "$T/good.jsonl"
[ "$(field "$T/out.jsonl" cached)" = "false" ] && pass "damaged entry recompiled" || fail "damaged" "used a damaged entry"
expect "repaired cache entry" compiled "" < "$T/good.jsonl"
[ "$(field "$T/out.jsonl" cached)" = "true" ] && pass "entry rewritten" || fail "rewrite" "not cached after repair"
expect "--no-cache" compiled "" --no-cache < "$T/good.jsonl"
[ "$(field "$T/out.jsonl" cached)" = "false" ] && pass "--no-cache compiles" || fail "--no-cache" "cached"

# 2b. A compile that succeeds can still warn: a store through a __constant__ variable's address is
#     compiled to a trap (NVVM's "Cannot store to pointer that points to constant memory space"),
#     which the policy sees in check.compile_warnings instead of a runtime_error it cannot explain.
$MK "$B/scale_add" --replace fused.cu "__global__ void scale_add" "__constant__ float c_w = 1.0f;
__global__ void scale_add" --replace fused.cu "out[i] = a[i] * alpha + b[i];" "out[i] = a[i] * alpha + b[i] + c_w; *(volatile float*)&c_w += 1.0f;" \
  | expect "store to a __constant__ compiles" compiled "compile-only"
python3 -c "
import json,sys; c=json.loads(open(sys.argv[1]).readline())['check']
w=c.get('compile_warnings') or []; assert any('constant memory space' in x and 'fused.cu(' in x for x in w), w" "$T/out.jsonl" \
  && pass "compile_warnings names the store to constant memory" || fail "compile_warnings" "$(field "$T/out.jsonl" compile_warnings)"

# 3. Compile errors carry NVRTC's message.
$MK "$B/scale_add" --replace fused.cu "out[i] = a[i] * alpha + b[i];" "out[i] = a[i] * alpha + b[i]" \
  | expect "syntax error" compile_error "fused.cu(6): error"
python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline())['check']; assert 'expected a \";\"' in r['log'] and r['compiled'] is False" "$T/out.jsonl" \
  && pass "log has NVRTC's message" || fail "log" "$(field "$T/out.jsonl" log)"

# 4. Plan errors, each naming what is wrong.
$MK "$B/scale_add" --plan-replace "N, 2.0]" "2.0]" | expect "missing argument" plan_error "kernel scale_add takes 5"
[ "$(field "$T/out.jsonl" kernel)" = "scale_add" ] && pass "plan_error names the kernel" || fail "kernel field" "$(field "$T/out.jsonl" kernel)"
$MK "$B/scale_add" --plan-replace "launch: scale_add" "launch: scale_sub" | expect "unknown kernel" plan_error "kernel 'scale_sub' is not defined"
$MK "$B/scale_add" --plan-replace "N, 2.0]" "N, 2.0, 7]" | expect "too many arguments" plan_error "6 arguments given"
$MK "$B/scale_add" --plan-replace "N, 2.0]" "N, 2]" | expect "int for float" plan_error "argument 5 is int"
$MK "$B/scale_add" --plan-replace "N, 2.0]" "2.0, N]" | expect "float for int" plan_error "argument 4 is float"
$MK "$B/scale_add" --plan-replace "args: [inputs.0," "args: [N," | expect "scalar for pointer" plan_error "kernel expects const float*"
$MK "$B/scale_add" --plan-replace "N, 2.0]" "inputs.1, 2.0]" | expect "buffer for int" plan_error "is the buffer inputs.1, kernel expects int"
$MK "$B/scale_add" --plan-replace "cdiv(N, 256)" "cdiv(M, 256)" | expect "unbound dim" plan_error "unbound name 'M'"
$MK "$B/scale_add" --plan-replace "forward:" "init:
  - launch: scale_add
    grid: [1]
    block: [1]
    args: [inputs.0, inputs.1, outputs.0, N, 2.0]
forward:" | expect "init touching an input" plan_error "init steps read params and write scratch"
$MK "$B/scale_add" --plan-replace "forward:" "outputs: 2
forward:" | expect "unwritten output declared" plan_error "outputs.1 is never written"
$MK "$B/scale_add" --plan-replace "outputs.0, N" "inputs.0, N" | expect "output never written" plan_error "outputs.0 is never written"
$MK "$B/scale_add" --plan-replace "block: [256]" "block: [2048]" | expect "block too big" plan_error "block[0] = 2048"
$MK "$B/scale_add" --plan-replace "args: [inputs.0," "args: [inputs.7," | expect "no such input" plan_error "inputs.7 does not exist"
$MK "$B/scale_add" --plan-replace "dims: {N: inputs.0.shape[0]}" "dims: {N: inputs.0.shape[0}" | expect "bad YAML" plan_error "not valid YAML"
$MK "$B/scale_add" --plan-replace "launch: scale_add" "lunch: scale_add" | expect "unknown step kind" plan_error "unknown step kind"
$MK "$B/row_softmax" --plan-replace "softmax_rows<256>" "softmax_rows<float>" | expect "bad template argument" plan_error "softmax_rows<float>"
# The bundle contract (issue 17): an unknown key names itself and the nearest valid one; sizes the
# device cannot launch are plan errors before any shape is known; init.N is typed by its value.
$MK "$B/linear_relu_gemm" --plan-replace "activation: relu" "activaton: relu" \
  | expect "misspelled gemm key" plan_error "unknown key 'activaton' (did you mean 'activation'?)"
$MK "$B/scale_add" --plan-replace "block: [256]" "blok: [256]
    block: [256]" | expect "misspelled launch key" plan_error "unknown key 'blok' (did you mean 'block'?)"
$MK "$B/scale_add" --plan-replace "dims:" "scratch:
  tmp: {dtype: float32, shap: [4]}
dims:" | expect "misspelled scratch key" plan_error "unknown key 'shap' (did you mean 'shape'?)"
$MK "$B/scale_add" --plan-replace "forward:" "fowrard:" | expect "misspelled top-level key" plan_error "did you mean 'forward'?"
$MK "$B/scale_add" --no-task --plan-replace "block: [256]" "block: [2048]" | expect "block too big, no shapes known" plan_error "block[0] = 2048"
$MK "$B/scale_add" --no-task --plan-replace "block: [256]" "block: [32, 32, 2]" | expect "2048 threads, no shapes known" plan_error "block has 2048 threads"
$MK "$B/scale_add" --no-task --plan-replace "grid: [cdiv(N, 256)]" "grid: [cdiv(N, 256)]
    shared: 300000" | expect "shared too big, no shapes known" plan_error "shared = 300000 bytes"
$MK "$B/scale_add" --no-task --plan-replace "N, 2.0]" "N, init.0]" | expect "init.0 for a float, values unknown" compiled ""
$MK "$B/scale_add" --plan-replace "N, 2.0]" "N, init.0]" --task-set init_inputs '[0.5]' | expect "init.0 = 0.5 for a float" compiled ""
$MK "$B/scale_add" --plan-replace "N, 2.0]" "N, init.0]" --task-set init_inputs '[3]' | expect "init.0 = 3 for a float" plan_error "argument 5 is int"
# Hostile sizes: 64-bit arithmetic that would wrap (or trap: INT64_MIN / -1 ended kernel-check with
# SIGFPE, and every record in flight with it) is a plan error naming the expression; gemm sizes from
# expressions must be at least 1 and fit their buffers without wrapping; scratch that cannot exist
# is refused before anything is allocated.
$MK "$B/scale_add" --plan-replace "grid: [cdiv(N, 256)]" "grid: [(-9223372036854775807 - 1) / -1]" \
  | expect "INT64_MIN / -1 (was SIGFPE)" plan_error "integer overflow in '(-9223372036854775807 - 1) / -1'"
$MK "$B/scale_add" --plan-replace "N, 2.0]" "N * 9223372036854775807, 2.0]" \
  | expect "a scalar that wraps" plan_error "argument 4: integer overflow in 'N * 9223372036854775807'"
$MK "$B/scale_add" --plan-replace "grid: [cdiv(N, 256)]" "grid: [-(-9223372036854775807 - 1)]" \
  | expect "negating INT64_MIN" plan_error "integer overflow"
$MK "$B/scale_add" --plan-replace "grid: [cdiv(N, 256)]" "grid: [cdiv(9223372036854775807, 4611686018427387904)]" \
  | expect "cdiv near INT64_MAX is exact" compiled ""
for v in "m: -4" "m: 0" "batch: -1"; do
  $MK "$B/linear_relu_gemm" --plan-replace "trans_b: true" "trans_b: true
      $v" | expect "gemm $v" plan_error "every size must be at least 1"
done
$MK "$B/linear_relu_gemm" --plan-replace "trans_b: true" "trans_b: true
      k: 4611686018427387904" | expect "gemm k that wraps into a fit" plan_error "k=4611686018427387904 batch=1 does not fit the buffers"
$MK "$B/scale_add" --plan-replace "forward:" "scratch:
  big: {dtype: float32, shape: [4611686018427387904, 4]}
forward:" | expect "scratch whose size wraps" plan_error "scratch.big: shape too large"
$MK "$B/scale_add" --plan-replace "forward:" "scratch:
  a: {dtype: uint8, shape: [4611686018427387904]}
  b: {dtype: uint8, shape: [4611686018427387904]}
forward:" | expect "scratch sizes that add up past 2^63" plan_error "add up past 2^63 bytes"
# Hostile expression sizes: 300,000 nested parentheses (or signs) overflowed the parser's stack and
# ended kernel-check with SIGSEGV; a long expression and deep nesting are plan errors naming the limit.
$MK "$B/scale_add" --plan-replace "grid: [cdiv(N, 256)]" "grid: [cdiv(@DEEP@, 256)]" \
  | python3 -c 'import sys; sys.stdout.write(sys.stdin.read().replace("@DEEP@", "(" * 300000 + "N" + ")" * 300000))' \
  | expect "300,000 nested parentheses (was SIGSEGV)" plan_error "(limit: expression length)"
deep=$(python3 -c 'print("(" * 100 + "N" + ")" * 100)')
$MK "$B/scale_add" --plan-replace "grid: [cdiv(N, 256)]" "grid: [cdiv($deep, 256)]" \
  | expect "100 nested parentheses" plan_error "nested more than 64 levels deep (limit: expression nesting)"
deep=$(python3 -c 'print("(" * 30 + "N" + ")" * 30)')
$MK "$B/scale_add" --plan-replace "grid: [cdiv(N, 256)]" "grid: [cdiv($deep, 256)]" | expect "30 nested parentheses" compiled ""
# Hostile text sizes against the rule scanners (RE2 now; std::regex recursed per character): a
# 1 MiB comment line ended kernel-check with SIGSEGV, as did any long run the rules' patterns could
# span. Each is now answered, and the rules still see across the run. (@X@ and @S@ stand for 1 MiB
# of x and of spaces, @H@ for 512 KiB of x: an argument that long is past the kernel's limit.)
inflate() {
  python3 -c 'import sys; sys.stdout.write(sys.stdin.read().replace("@X@", "x" * (1 << 20)).replace("@S@", " " * (1 << 20)).replace("@H@", "x" * (1 << 19)))'
}
$MK "$B/scale_add" --add-file big.cuh "// @X@" | inflate | expect "a 1 MiB comment line (was SIGSEGV)" compiled ""
$MK "$B/scale_add" --replace fused.cu "__global__" "@S@#include <cstdio>
__global__" | inflate | expect "#include after a 1 MiB run of spaces" policy_violation "allowed_headers: fused.cu:3"
$MK "$B/scale_add" --replace fused.cu "if (i < n)" "long long t = clock64@S@(); if (i < n + (t & 0))" | inflate \
  | expect "clock64 and its ( a 1 MiB run apart" policy_violation "clock: fused.cu:5"
$MK "$B/scale_add" --plan-replace "args: [inputs.0," "args: [inputs.@H@," | inflate \
  | expect "a 512 KiB buffer name in the plan" plan_error "does not exist"

# 5. Policy rules, each naming the rule and the source line.
$MK "$B/scale_add" --replace fused.cu "if (i < n)" "long long t = clock64(); if (i < n + (t & 0))" | expect "clock64" policy_violation "clock: fused.cu:5"
$MK "$B/scale_add" --replace fused.cu "if (i < n)" 'unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); if (i < n + (t & 0))' \
  | expect "globaltimer" policy_violation "globaltimer: fused.cu:5"
$MK "$B/scale_add" --replace fused.cu "if (i < n)" 'if (i == 0) printf("hi\n"); if (i < n)' | expect "printf" policy_violation "printf: fused.cu:5"
$MK "$B/scale_add" --replace fused.cu "if (i < n)" 'float* p = (float*)malloc(4); if (i < n)' | expect "device malloc" policy_violation "device_malloc: fused.cu:5"
$MK "$B/scale_add" --replace fused.cu "if (i < n)" '#define TICK clo##ck64
  long long t = TICK(); if (i < n + (t & 0))' | expect "clock behind a macro (PTX)" policy_violation "found in the PTX"
$MK "$B/scale_add" --replace fused.cu "__global__" '#include <cstdio>
__global__' | expect "header not allowed" policy_violation "allowed_headers: fused.cu:3"
$MK "$B/scale_add" --replace fused.cu "__global__" '#include <cuda_fp16.h>
__global__' | expect "allowed header" compiled ""
$MK "$B/scale_add" --replace fused.cu "__global__" '__device__ float big_state[1 << 20];
__global__' --replace fused.cu "if (i < n) out[i]" "big_state[i & 1023] = 1; if (i < n) out[i]" \
  | expect "big module-scope array" policy_violation "max_module_global_bytes"
$MK "$B/scale_add" --replace fused.cu "__global__" '__device__ float small_state[256];
__global__' | expect "small module-scope array" compiled ""
$MK "$B/scale_add" --replace fused.cu "// out[i]" "// printf( clock64( in a comment is fine
// out[i]" | expect "comments ignored" compiled ""
printf 'allowed_steps: [launch]\n' > "$T/nolib.yaml"
$MK "$B/linear_relu_gemm" | expect "gemm allowed by default" compiled ""
$MK "$B/linear_relu_gemm" | expect "gemm forbidden by --policy" policy_violation "allowed_steps" --policy "$T/nolib.yaml"
printf 'max_forward_steps: 1\n' > "$T/onestep.yaml"
$MK "$B/scale_add" --plan-replace "forward:" "forward:
  - launch: scale_add
    grid: [cdiv(N, 256)]
    block: [256]
    args: [inputs.0, inputs.1, outputs.0, N, 2.0]" | expect "max_forward_steps" policy_violation "forward has 2 steps" --policy "$T/onestep.yaml"
# Issue 33's worked bundles bind against their tasks' shapes: repeat with views, cooperative,
# cluster, conv views.
for b in rnn_recurrence global_l1_norm_coop row_sum_cluster inception_concat_views concat_strided mlp_layers_repeat; do
  $MK "$B/$b" | expect "worked bundle $b" compiled "compile-only"
done
$MK "$B/row_sum_cluster" --plan-replace "cluster: [8]" "cluster: [32]" | expect "a cluster of 32 blocks" plan_error "at most 16"
$MK "$B/rnn_recurrence" --plan-replace "repeat: T - 1" "repeat: T + 1" | expect "a repeat whose views run past scratch" plan_error "is outside scratch.xw"
# A task that carries only its code: compiled, and the record says what it could not check.
$MK "$B/scale_add" | python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); r['task']={'task_id': r['task']['task_id'], 'code': r['task']['code']}; print(json.dumps(r))" \
  | expect "shapes unknown: says what was not checked" compiled "shapes and the scratch cap were not checked"
case "$(field "$T/out.jsonl" unchecked)" in *scratch_cap*) pass "check.unchecked listed" ;; *) fail "unchecked" "no check.unchecked" ;; esac
# Repeats count as what a call launches once unrolled (here 1 + 3 = 4 > 3); a loop of 2 fits.
printf 'max_forward_steps: 3\n' > "$T/threesteps.yaml"
$MK "$B/scale_add" --plan-replace "forward:" "forward:
  - repeat: 3
    index: t
    steps:
      - launch: scale_add
        grid: [cdiv(N, 256)]
        block: [256]
        args: [inputs.0, inputs.1, outputs.0, N - t, 2.0]" | expect "max_forward_steps counts unrolled repeats" policy_violation "forward runs 4 steps per call once its repeats are unrolled" --policy "$T/threesteps.yaml"
$MK "$B/scale_add" --plan-replace "forward:" "forward:
  - repeat: 2
    index: t
    steps:
      - launch: scale_add
        grid: [cdiv(N, 256)]
        block: [256]
        args: [\"inputs.0[t]\", inputs.1, \"outputs.0[t]\", N - t, 2.0]" | expect "a repeat of views within the count" compiled "" --policy "$T/threesteps.yaml"
$MK "$B/scale_add" --plan-replace "forward:" "forward:
  - repeat: 2
    steps:
      - launch: scale_add
        grid: [cdiv(N, 256)]
        block: [256]
        args: [\"inputs.0[N + 1]\", inputs.1, outputs.0, N, 2.0]" | expect "a view past its buffer" plan_error "is outside inputs.0"
$MK "$B/scale_add" --plan-replace "forward:" "scratch:
  huge: {dtype: float32, shape: [N, 1024]}
forward:" | expect "scratch cap" policy_violation "max_scratch_ratio"
$MK "$B/scale_add" --plan-replace "forward:" "scratch:
  tmp: {dtype: float32, shape: [N]}
forward:" | expect "scratch within cap" compiled ""
[ "$(field "$T/out.jsonl" scratch_cap)" = '{"bytes": 67108864, "from": "io_ratio"}' ] && pass "check.scratch_cap: the io floor" \
  || fail "scratch_cap io floor" "$(field "$T/out.jsonl" scratch_cap)"
# The cap follows the task's reference (issue 33): VGG-sized scratch (two 10x64x224x224 activation
# buffers, 257 MB, against this task's 64 MiB io floor) passes where the record states the
# reference's peak (as eager holds both while VGG's conv1_2 runs: 257 MB), and is refused naming
# max_scratch_ratio where it does not, or where its peak is under the floor; above 2x the peak it is
# refused naming scratch_peak_factor. In compile-only the record's word sizes it, and the check says so.
vgg="scratch:
  act0: {dtype: float32, shape: [10, 64, 224, 224]}
  act1: {dtype: float32, shape: [10, 64, 224, 224]}
forward:"
$MK "$B/scale_add" --plan-replace "forward:" "$vgg" --task-set reference '{"mode": "train", "peak_bytes": 256901120}' \
  | expect "VGG-sized scratch with the record's peak" compiled ""
[ "$(field "$T/out.jsonl" scratch_cap)" = '{"bytes": 530579456, "from": "task_record", "peak_bytes": 256901120}' ] \
  && pass "check.scratch_cap from the task record" || fail "scratch_cap task_record" "$(field "$T/out.jsonl" scratch_cap)"
$MK "$B/scale_add" --plan-replace "forward:" "$vgg" | expect "VGG-sized scratch without a peak" policy_violation "max_scratch_ratio"
case "$(field "$T/out.jsonl" reason)" in *"states no reference.peak_bytes"*) pass "the refusal says the peak is not known" ;;
  *) fail "no peak reason" "$(field "$T/out.jsonl" reason)" ;; esac
$MK "$B/scale_add" --plan-replace "forward:" "$vgg" --task-set reference '{"mode": "train", "peak_bytes": 4096}' \
  | expect "VGG-sized scratch, a peak under the floor" policy_violation "max_scratch_ratio"
$MK "$B/scale_add" --plan-replace "forward:" "$vgg" --task-set reference '{"mode": "train", "peak_bytes": 100000000}' \
  | expect "VGG-sized scratch over 2x the peak" policy_violation "scratch_peak_factor: scratch buffers total 256901120 bytes, the rules allow 216777216"
printf 'scratch_cap: io_ratio\n' > "$T/ioratio.yaml"
$MK "$B/scale_add" --plan-replace "forward:" "$vgg" --task-set reference '{"mode": "train", "peak_bytes": 256901120}' \
  | expect "scratch_cap: io_ratio ignores the peak" policy_violation "the rules' scratch_cap is io_ratio" --policy "$T/ioratio.yaml"
printf 'scratch_cap: largest\n' > "$T/badcap.yaml"
$MK "$B/scale_add" | "$KC" --compile-only --no-store --policy "$T/badcap.yaml" > /dev/null 2> "$T/err.txt"; rc=$?
[ $rc = 1 ] && grep -q "scratch_cap: 'largest' is not a cap" "$T/err.txt" && pass "a bad scratch_cap is a usage error naming it" \
  || fail "bad scratch_cap" "exit $rc: $(cat "$T/err.txt")"

# 6. The other worked bundles compile.
$MK "$B/row_softmax" | expect "row softmax" compiled ""
$MK "$B/linear_relu_tiled" | expect "tiled linear" compiled ""

# 7. Schema: every check section written above validates.
if /usr/bin/python3 -c "import jsonschema" 2>/dev/null; then
  CA_SRC="$CA_SRC" /usr/bin/python3 "$CA_SRC/tests/validate_schema.py" check "$T/all.jsonl" && pass "schema" || fail "schema" "check sections do not validate"
else
  fail "schema" "/usr/bin/python3 has no jsonschema"
fi

# 8. Without --compile-only and without a GPU: no_device, exit 3, CPU verdicts still given.
( $MK "$B/scale_add"; $MK "$B/scale_add" --replace fused.cu "b[i];" "b[i]" ) \
  | "$KC" --arch sm_90 --no-store > "$T/nodev.jsonl" 2> "$T/err.txt"
rc=$?
s1=$(sed -n 1p "$T/nodev.jsonl" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['check']['status'])")
s2=$(sed -n 2p "$T/nodev.jsonl" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['check']['status'])")
[ $rc -eq 3 ] && [ "$s1" = no_device ] && [ "$s2" = compile_error ] && pass "no_device, exit 3" || fail "no_device" "rc=$rc $s1 $s2: $(tail -2 "$T/err.txt")"
grep -q "no GPU" "$T/err.txt" && pass "no_device message" || fail "no_device message" "$(cat "$T/err.txt")"
# A GPU judge's scratch cap is its own worker's: the CPU stage before it binds the record's shapes for
# the other rules and leaves the cap alone (the VGG-sized scratch over the io floor, a record without
# a peak: no_device here, not a policy_violation decided by the record), while an over-long repeat
# is still refused before any GPU.
printf 'max_forward_steps: 3\n' > "$T/threesteps.yaml"
( $MK "$B/scale_add" --plan-replace "forward:" "$vgg"
  $MK "$B/scale_add" --plan-replace "forward:" "forward:
  - repeat: 3
    steps:
      - launch: scale_add
        grid: [cdiv(N, 256)]
        block: [256]
        args: [inputs.0, inputs.1, outputs.0, N, 2.0]" ) \
  | "$KC" --arch sm_90 --no-store --policy "$T/threesteps.yaml" > "$T/nodev.jsonl" 2> "$T/err.txt"
python3 - "$T/nodev.jsonl" <<'PY' && pass "without --compile-only the scratch cap waits for the judge's worker; other rules do not" \
  || fail "scratch cap left to the judge" "$(cut -c1-300 "$T/nodev.jsonl")"
import json, sys
a, b = [json.loads(l)["check"] for l in open(sys.argv[1])]
assert a["status"] == "no_device" and "scratch_cap" not in a and a["scratch_bytes"] == 256901120, a
assert b["status"] == "policy_violation" and b["violation"]["rule"] == "max_forward_steps", b
PY

# 9. Bad input: a non-JSON line is fatal (exit 2); a record without a bundle gets an error section.
printf '{"task_id":"t"}\nnot json\n' | "$KC" --compile-only --no-store > "$T/bad.jsonl" 2> "$T/err.txt"
rc=$?
[ $rc -eq 2 ] && grep -q "line 2" "$T/err.txt" && pass "bad line: exit 2 naming the line" || fail "bad line" "rc=$rc $(cat "$T/err.txt")"
printf '{"task_id":"t"}\n' | "$KC" --compile-only --no-store > "$T/bad.jsonl" 2> "$T/err.txt"
rc=$?
python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); assert r['error']['field']=='bundle', r" "$T/bad.jsonl" && [ $rc -eq 0 ] \
  && pass "missing bundle: error section" || fail "missing bundle" "rc=$rc $(cat "$T/bad.jsonl")"
printf '{"task_id":"t"}\n' | "$KC" --compile-only --no-store --strict > /dev/null 2> "$T/err.txt"
[ $? -eq 2 ] && pass "--strict: exit 2" || fail "--strict" "$(cat "$T/err.txt")"
"$KC" --compile-only --arch bogus --no-store < "$T/good.jsonl" > /dev/null 2>&1
[ $? -eq 1 ] && pass "bad --arch: exit 1" || fail "bad --arch" "not a usage error"

# 10. Order: a stream of mixed candidates comes out in input order.
( for i in 1 2 3; do $MK "$B/scale_add"; $MK "$B/row_softmax"; $MK "$B/scale_add" --replace fused.cu "b[i];" "b[i]"; done ) \
  | "$KC" --compile-only --no-store -j 3 > "$T/order.jsonl" 2>/dev/null
order=$(python3 -c "
import json,sys
print(' '.join(json.loads(l)['check']['status'] for l in open(sys.argv[1])))" "$T/order.jsonl")
[ "$order" = "compiled compiled compile_error compiled compiled compile_error compiled compiled compile_error" ] \
  && pass "input order kept" || fail "order" "$order"

# 11. The store: checks are rows; --resume reuses a final verdict instead of compiling again.
$MK "$B/scale_add" --replace fused.cu "b[i];" "b[i]" > "$T/bad_syntax.jsonl"
"$KC" --compile-only --store "$T/s.db" < "$T/bad_syntax.jsonl" > /dev/null 2> "$T/err1.txt"
"$KC" --compile-only --store "$T/s.db" --resume < "$T/bad_syntax.jsonl" > "$T/resumed.jsonl" 2> "$T/err2.txt"
rows=$("$CA_BIN/run-store" query "SELECT COUNT(*) AS n FROM checks" --store "$T/s.db" 2>/dev/null | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['n'])" 2>/dev/null || echo "?")
grep -q "1 skipped" "$T/err2.txt" && [ "$(field "$T/resumed.jsonl" status)" = compile_error ] \
  && pass "--resume reuses the stored verdict (checks rows: $rows)" || fail "--resume" "$(cat "$T/err2.txt")"
# An environment failure stored as the latest row (the worker could not compute the reference, the
# node could not hold the candidate's buffers) is no verdict: --resume judges the candidate again.
for st in reference_error node_error; do
  python3 - "$T/s.db" "$st" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for rowid, body in db.execute("SELECT rowid, body FROM checks").fetchall():
    b = json.loads(body)
    b.update({"status": sys.argv[2], "correct": None, sys.argv[2]: True})
    db.execute("UPDATE checks SET status = ?, body = ? WHERE rowid = ?", (sys.argv[2], json.dumps(b), rowid))
db.commit()
PY
  "$KC" --compile-only --store "$T/s.db" --resume < "$T/bad_syntax.jsonl" > "$T/again.jsonl" 2> "$T/err3.txt"
  ! grep -q "1 skipped" "$T/err3.txt" && [ "$(field "$T/again.jsonl" status)" = compile_error ] \
    && pass "--resume judges a stored $st again" || fail "--resume after $st" "$(cat "$T/err3.txt") $(cat "$T/again.jsonl")"
done
# A stored row whose status or judged_by is not a string (run-store import stores a record's check as it
# came) is no verdict to reuse: judged again, never the JSON library's type error (exit 4).
for bad in '{"status": 5}' '{"judged_by": ["x"]}'; do
  python3 - "$T/s.db" "$bad" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for rowid, body in db.execute("SELECT rowid, body FROM checks").fetchall():
    b = json.loads(body)
    b.update(json.loads(sys.argv[2]))
    db.execute("UPDATE checks SET body = ? WHERE rowid = ?", (json.dumps(b), rowid))
db.commit()
PY
  rc=0; "$KC" --compile-only --store "$T/s.db" --resume < "$T/bad_syntax.jsonl" > "$T/again.jsonl" 2> "$T/err3.txt" || rc=$?
  [ "$rc" = 0 ] && ! grep -q "1 skipped" "$T/err3.txt" && [ "$(field "$T/again.jsonl" status)" = compile_error ] \
    && pass "--resume judges a stored row with $bad again" || fail "--resume after $bad (exit $rc)" "$(cat "$T/err3.txt")"
done
# A stored verdict is reused only when judged alike (check.judged_by: the rules' content, the judging
# options, the build): a verdict stored under one rules file, or with another --arch, or a row from
# before judged_by, is judged again, never taken by its candidate id alone.
printf 'allowed_steps: [launch]\n' > "$T/launch_only.yaml"
"$KC" --compile-only --store "$T/j.db" --rules "$T/launch_only.yaml" < "$T/bad_syntax.jsonl" > /dev/null 2> "$T/j1.txt"
"$KC" --compile-only --store "$T/j.db" --rules "$T/launch_only.yaml" --resume < "$T/bad_syntax.jsonl" > "$T/j2.jsonl" 2> "$T/j2.txt"
grep -q "1 skipped" "$T/j2.txt" && pass "--resume under the same rules file reuses its verdict" || fail "--resume, same rules" "$(cat "$T/j2.txt")"
"$KC" --compile-only --store "$T/j.db" --resume < "$T/bad_syntax.jsonl" > "$T/j3.jsonl" 2> "$T/j3.txt"
! grep -q "1 skipped" "$T/j3.txt" && [ "$(field "$T/j3.jsonl" status)" = compile_error ] \
  && pass "--resume under other rules judges again" || fail "--resume, other rules" "$(cat "$T/j3.txt")"
"$KC" --compile-only --store "$T/j.db" --resume --arch sm_80 < "$T/bad_syntax.jsonl" > "$T/j4.jsonl" 2> "$T/j4.txt"
! grep -q "1 skipped" "$T/j4.txt" && pass "--resume with another --arch judges again" || fail "--resume, other arch" "$(cat "$T/j4.txt")"
python3 - "$T/j.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for rowid, body in db.execute("SELECT rowid, body FROM checks").fetchall():
    b = json.loads(body)
    b.pop("judged_by", None)
    db.execute("UPDATE checks SET body = ? WHERE rowid = ?", (json.dumps(b), rowid))
db.commit()
PY
"$KC" --compile-only --store "$T/j.db" --resume --arch sm_80 < "$T/bad_syntax.jsonl" > "$T/j5.jsonl" 2> "$T/j5.txt"
! grep -q "1 skipped" "$T/j5.txt" && pass "--resume judges a row without judged_by again" || fail "--resume, no judged_by" "$(cat "$T/j5.txt")"
# judged_by holds the build by content (build_identity: the executable's bytes, the worker's Python
# sources), not a version string: a rebuilt binary (here the same one with a byte appended, which
# still runs) or an edited worker judges again; the same binary and worker reuse the verdict.
"$KC" --compile-only --store "$T/j.db" --resume --arch sm_80 < "$T/bad_syntax.jsonl" > /dev/null 2> "$T/j6.txt"
grep -q "1 skipped" "$T/j6.txt" || fail "--resume, same build" "$(cat "$T/j6.txt")"
cp "$KC" "$T/kc-rebuilt" && printf '\0' >> "$T/kc-rebuilt"
"$T/kc-rebuilt" --compile-only --store "$T/j.db" --resume --arch sm_80 < "$T/bad_syntax.jsonl" > "$T/j7.jsonl" 2> "$T/j7.txt"
! grep -q "1 skipped" "$T/j7.txt" && [ "$(field "$T/j7.jsonl" status)" = compile_error ] \
  && pass "--resume by another build of kernel-check judges again (the same build reuses)" || fail "--resume, rebuilt" "$(cat "$T/j7.txt")"
rm -f "$T/kc-rebuilt"
cp -r "${CUDA_AGENT_PYTHONPATH:-$CA_SRC/libcommon/python}" "$T/py" && echo "# edited" >> "$T/py/cuda_agent_worker/numerics.py"
CUDA_AGENT_PYTHONPATH="$T/py" "$KC" --compile-only --store "$T/j.db" --resume --arch sm_80 < "$T/bad_syntax.jsonl" > /dev/null 2> "$T/j8.txt"
! grep -q "1 skipped" "$T/j8.txt" && pass "--resume with an edited reference worker judges again" || fail "--resume, edited worker" "$(cat "$T/j8.txt")"
# A stored row moved under another candidate's id (by hand, or by an older version that stored a
# record under the id it claimed) keeps the judged_by of the bundle it judged (the bundle's content is
# in it): it is never reused for the bundle that owns that id (R1's case 14b, before: reused).
"$KC" --compile-only --store "$T/r.db" < "$T/bad_syntax.jsonl" > /dev/null 2> "$T/r1.txt"
"$KC" --compile-only --no-store < "$T/good.jsonl" > "$T/good_out.jsonl" 2> /dev/null
python3 - "$T/r.db" "$T/good_out.jsonl" <<'PY'
import json, sqlite3, sys
gid = json.loads(open(sys.argv[2]).readline())["candidate_id"]
db = sqlite3.connect(sys.argv[1])
assert db.execute("UPDATE checks SET candidate_id = ?", (gid,)).rowcount == 1
db.commit()
PY
"$KC" --compile-only --store "$T/r.db" --resume < "$T/good.jsonl" > "$T/r2.jsonl" 2> "$T/r2.txt"
! grep -q "1 skipped" "$T/r2.txt" && [ "$(field "$T/r2.jsonl" status)" = compiled ] \
  && pass "--resume does not reuse a row moved under another bundle's id" \
  || fail "--resume, moved row" "$(field "$T/r2.jsonl" status): $(cat "$T/r2.txt")"
# A record carrying its own task is judged against that task whatever its task_id names, and stored
# under that id: a later --resume of the named task (from --tasks) does not reuse it (judged_by holds
# the judged task's content). Here the own task's 1000-element input makes a plan_error that the
# named task's 1024 elements do not.
python3 - "$T" <<'PY'
import json, sys
T = sys.argv[1]
def task(n):
    return {"code": "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2.0\n"
            "def get_inputs():\n    return [torch.randn(%d)]\ndef get_init_inputs():\n    return []\n" % n,
            "inputs": [{"name": "x", "shape": [n], "dtype": "F32"}], "outputs": [{"shape": [n], "dtype": "F32"}], "params": [], "init_inputs": []}
bundle = {"kernels": {"k.cu": "__global__ void s(const float* x, float* y) { int i = blockIdx.x * 256 + threadIdx.x; y[i] = 2.0f * x[i]; }\n"},
          "plan": "forward:\n  - launch: s\n    grid: [4]\n    block: [256]\n    args: [inputs.0, outputs.0]\n"
                  "  - launch: s\n    grid: [1]\n    block: [1]\n    args: [\"inputs.0[1010]\", \"outputs.0[1010]\"]\n"}
open(T + "/named_tasks.jsonl", "w").write(json.dumps(dict(task(1024), task_id="T-named")) + "\n")
open(T + "/own_task.jsonl", "w").write(json.dumps({"task_id": "T-named", "task": task(1000), "bundle": bundle}) + "\n")
open(T + "/named.jsonl", "w").write(json.dumps({"task_id": "T-named", "bundle": bundle}) + "\n")
PY
"$KC" --compile-only --store "$T/m.db" < "$T/own_task.jsonl" > "$T/m1.jsonl" 2> /dev/null
"$KC" --compile-only --store "$T/m.db" --resume < "$T/own_task.jsonl" > /dev/null 2> "$T/m3.txt"
grep -q "1 skipped" "$T/m3.txt" && pass "--resume reuses it for the same own task" || fail "--resume, same own task" "$(cat "$T/m3.txt")"
"$KC" --compile-only --store "$T/m.db" --resume --tasks "$T/named_tasks.jsonl" < "$T/named.jsonl" > "$T/m2.jsonl" 2> "$T/m2.txt"
[ "$(field "$T/m1.jsonl" status)" = plan_error ] && ! grep -q "1 skipped" "$T/m2.txt" && [ "$(field "$T/m2.jsonl" status)" = compiled ] \
  && pass "--resume does not reuse a verdict judged against another task's content under the same task_id" \
  || fail "--resume, other task content" "$(field "$T/m1.jsonl" status) then $(field "$T/m2.jsonl" status): $(cat "$T/m2.txt")"

fails=$(wc -l < "$T/failures")
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
