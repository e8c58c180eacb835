#!/usr/bin/env bash
# The CPU-visible part of the adversarial suite (issue 16): bundles that try to make the compiler
# quote host files or the environment, file names that inject lines, plans that bomb the parser,
# timer reads hidden from the source scan, and precision the PTX gives away. Each is refused with a
# named reason, nothing of the host reaches the output, and the record after a bomb is judged.
set -u
KC="$CA_BIN/kernel-check"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache"
failures=0
KC_RULES=""
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

# A host file with a marker the output must never show, written so that NVRTC would quote it
# (a syntax error on its first line), and an environment variable with another marker.
mkdir -p "$T/host"
printf 'HOSTFILE_MARKER_7f3a garbage here ;\nint HOSTFILE_MARKER_LINE2;\n' > "$T/host/secret.h"
export SECRET_ENV_MARKER=ENVIRON_MARKER_91c2

# cand NAME KERNEL_SOURCE [FILE_NAME]: one candidate line (the scale_add plan) into $T/NAME.jsonl.
cand() {
  python3 - "$1" "$2" "${3:-fused.cu}" > "$T/$1.jsonl" <<'EOF'
import json, sys
name, src, fname = sys.argv[1], sys.argv[2], sys.argv[3]
body = "__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = a[i] * alpha + b[i];\n}\n"
plan = "dims: {N: inputs.0.shape[0]}\nforward:\n  - launch: scale_add\n    grid: [cdiv(N, 256)]\n    block: [256]\n    args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n"
task = {"task_id": "adv-" + name, "inputs": [{"name": "a", "shape": [1024], "dtype": "F32"}, {"name": "b", "shape": [1024], "dtype": "F32"}],
        "outputs": [{"shape": [1024], "dtype": "F32"}]}
print(json.dumps({"task_id": task["task_id"], "candidate_id": "cand-" + name, "task": task,
                  "bundle": {"kernels": {fname: src.replace("@BODY@", body)}, "plan": plan}}))
EOF
}

# no_leak NAME EXPECTED_STATUS[|STATUS]: kernel-check --compile-only on $T/NAME.jsonl; the status is one of them
# and neither stdout nor stderr holds a host marker, a passwd line or the environment marker.
no_leak() {
  local name=$1 want=$2
  "$KC" --compile-only --arch sm_90 --no-store ${KC_RULES:+--rules "$KC_RULES"} < "$T/$name.jsonl" > "$T/$name.out" 2> "$T/$name.err"
  local rc=$?
  local got
  got=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['check']['status'])" "$T/$name.out" 2>/dev/null)
  if [ $rc -ne 0 ]; then fail "$name" "exit $rc: $(tail -3 "$T/$name.err")"; return; fi
  case "|$want|" in *"|$got|"*) ;; *) fail "$name" "status '$got', expected '$want': $(head -c 400 "$T/$name.out")"; return ;; esac
  if grep -qE 'HOSTFILE_MARKER|ENVIRON_MARKER|root:x?:0:0|SECRET_ENV' "$T/$name.out" "$T/$name.err"; then
    fail "$name" "host content in the output: $(grep -ohE '.{0,40}(HOSTFILE_MARKER|ENVIRON_MARKER|root:x?:0:0).{0,20}' "$T/$name.out" "$T/$name.err" | head -2)"
    return
  fi
  pass "$name: $got, nothing of the host quoted"
}

# 1. Every spelling of an include of a host file, and the process environment.
S=$T/host/secret.h
cand define_quoted   "#define F \"$S\"
#include F
@BODY@"
cand digraph         "%:include \"$S\"
@BODY@"
cand continuation    "#inc\\
lude \"$S\"
@BODY@"
cand define_angle    "#define F <$S>
#include F
@BODY@"
cand passwd_abs      "#include \"/etc/passwd\"
@BODY@"
cand environ         "#include \"/proc/self/environ\"
@BODY@"
cand dotdot          "#include \"../../../../../../../../..$S\"
@BODY@"
cand angle_abs       "#include </etc/passwd>
@BODY@"
cand pragma_once_abs "#pragma once
#include \"$S\"
@BODY@"
cand has_include     "#if __has_include(\"$S\")
#error found the host file
#endif
@BODY@"
# The host file named literally, with a rules file that allows that very name: the rules pass it on,
# so only the compiler's confinement stands between it and the file.
cand allowed_abs     "#include \"$S\"
@BODY@"
printf 'allowed_headers: ["%s"]\n' "$S" > "$T/allow_host.yaml"
# Both confinements: Landlock where the kernel has it, the libc interposition where it has not
# (gVisor GPU machines); each must refuse every spelling.
modes="interpose"
[ "$(python3 -c 'import ctypes; print(ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1))')" -ge 1 ] 2>/dev/null && modes="landlock interpose"
echo "confinements tested: $modes"
for mode in $modes; do
  export CUDA_AGENT_CONFINE=$mode CUDA_AGENT_CACHE="$T/cache-$mode"
  # Spellings a line-by-line scan could not read (a macro, the %: digraph, a backslash-newline): the
  # header rule reads them since session 18 (an include must name its header literally, read after
  # line splicing), so they are refused before the compiler; nothing of the host is quoted either way.
  for c in define_quoted digraph continuation define_angle; do
    no_leak "$c" policy_violation
  done
  # Allowed by the rules, the host file reaches the compiler, which cannot open it.
  KC_RULES="$T/allow_host.yaml" no_leak allowed_abs compile_error
  grep -q "\"compile_confinement\":\"$mode\"" "$T/allowed_abs.out" || fail "allowed_abs ($mode)" "check.compile_confinement is not $mode"
  # Plain spellings: the policy's header list refuses them first, or the compiler does.
  for c in passwd_abs environ dotdot angle_abs pragma_once_abs; do
    no_leak "$c" "compile_error|policy_violation"
  done
  # __has_include of a host path must not see it either (it compiles: the #error is not reached).
  no_leak has_include compiled
done
unset CUDA_AGENT_CONFINE
export CUDA_AGENT_CACHE="$T/cache"

# The refused include names its path (the agent's own text), and says it cannot be opened.
grep -q 'cannot open source file' "$T/allowed_abs.out" && pass "refused include: 'cannot open source file'" \
  || fail "refused include message" "$(head -c 300 "$T/allowed_abs.out")"
grep -q 'must name its header literally' "$T/define_quoted.out" && pass "an include through a macro: refused by the header rule" \
  || fail "include through a macro" "$(head -c 300 "$T/define_quoted.out")"

# 2. File names that would inject a line or a quote into the compiler's main file.
cand name_quote    "@BODY@" 'x".cu'
cand name_newline  "@BODY@" $'x.cu"\n#include "/etc/passwd'
cand name_abs      "@BODY@" "/etc/passwd"
cand name_dotdot   "@BODY@" "../x.cu"
for c in name_quote name_newline name_abs name_dotdot; do
  no_leak "$c" compile_error
  grep -q 'bundle file name' "$T/$c.out" && pass "$c: names the file name rule" || fail "$c reason" "$(head -c 300 "$T/$c.out")"
done

# 3. The timer read hidden from the source scan: the PTX shows it.
cand timer_concat  '__device__ unsigned long long t() { unsigned long long v; asm volatile("mov.u64 %0, %%glob" "altimer;" : "=l"(v)); return v; }
__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * alpha + b[i] + float(t() & 0);
}'
cand clock_paste   '#define CAT(a, b) a##b
__device__ long long t() { return CAT(clo, ck64)(); }
__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * alpha + b[i] + float(t() & 0);
}'
no_leak timer_concat policy_violation
no_leak clock_paste policy_violation
grep -q 'globaltimer' "$T/timer_concat.out" && pass "timer_concat: rule globaltimer" || fail "timer rule" "$(head -c 300 "$T/timer_concat.out")"
grep -q '"rule":"clock"' "$T/clock_paste.out" && pass "clock_paste: rule clock" || fail "clock rule" "$(head -c 300 "$T/clock_paste.out")"
# A kernel parameter's address (cvta.param): spelled in inline PTX split so the source scan misses it.
cand param_addr '__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long g;
  asm volatile("{ .reg .u64 q; mov.u64 q, _Z9scale_addPKfS0_Pfif_param_3; cvta.par" "am.u64 %0, q; }" : "=l"(g));
  if (i < n) out[i] = a[i] * alpha + b[i] + float(g & 0);
}'
no_leak param_addr policy_violation
grep -q '"rule":"param_address"' "$T/param_addr.out" && pass "param_addr: rule param_address" || fail "param_addr rule" "$(head -c 400 "$T/param_addr.out")"
# The special registers that count or tell apart what ran, each spelled so the source scan misses it:
# the PTX names it (rules grid_counter, launch_mode, perf_counters, env_registers).
for spec in "gridid grid_counter u64 l %%grid id" "graph launch_mode u64 l %%current_gr aph_exec" \
            "pm perf_counters u32 r %%p m3" "envreg env_registers u32 r %%envr eg7"; do
  read -r name rule width constraint head tail <<< "$spec"
  ctype="unsigned"; [ "$width" = u64 ] && ctype="unsigned long long"
  cand "sreg_$name" "__device__ unsigned long long t() { $ctype v = 0; asm volatile(\"mov.$width %0, $head\" \"$tail;\" : \"=$constraint\"(v)); return v; }
__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * alpha + b[i] + float(t() & 0);
}"
  no_leak "sreg_$name" policy_violation
  grep -q "\"rule\":\"$rule\"" "$T/sreg_$name.out" && pass "sreg_$name: rule $rule" || fail "sreg_$name rule" "$(head -c 400 "$T/sreg_$name.out")"
done

# 4. Precision from the PTX: dp4a is int8.
cand dp4a '__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float(__dp4a(int(a[i]), int(b[i]), 0)) * alpha;
}'
no_leak dp4a compiled
python3 -c "import json,sys; p=json.loads(open(sys.argv[1]).readline())['check']['precision']; sys.exit(0 if p=='int8' else print(p) or 1)" "$T/dp4a.out" \
  && pass "dp4a: precision int8" || fail "dp4a precision" "not int8"

# 4b. What the compiled code is (issue 31), whatever the spelling. Precision is read from the PTX as
#     ptxas reads it, per launched kernel with what it calls; the device heap is refused from what
#     the compiled code calls; the checker's kernel namespace (ca_...) is refused; __constant__
#     memory counts toward the module cap.
# field_is NAME KEY VALUE: check.KEY of $T/NAME.out (a dict key path a.b) equals VALUE.
field_is() {
  python3 - "$T/$1.out" "$2" "$3" <<'EOF2' && pass "$1: $2 = $3" || fail "$1 $2" "$(head -c 400 "$T/$1.out")"
import json, sys
v = json.loads(open(sys.argv[1]).readline())["check"]
for k in sys.argv[2].split("."):
    v = v[k]
sys.exit(0 if v == sys.argv[3] else 1)
EOF2
}
# prec NAME EXPECTED SOURCE: compiled, record precision EXPECTED, the launched scale_add's too.
prec() {
  cand "$1" "$3"
  no_leak "$1" compiled
  field_is "$1" precision "$2"
  field_is "$1" kernel_precision.scale_add "$2"
}
H='#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
'
MMA_ARGS=': "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5])'
SIG='__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;'
prec p_fp32 fp32 "@BODY@"
prec p_mma_newline fp16 "$SIG
  const unsigned* r = (const unsigned*)a; float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile(\"mma\\n  .sync\\n\\t.aligned.m16n8k16.row.col.f32\\n.f16\\n.f16\\r\\n.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\" $MMA_ARGS);
  if (i < n) out[i] = d0 + d1 + d2 + d3;
}"
prec p_mma_comments bf16 "$SIG
  const unsigned* r = (const unsigned*)a; float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile(\"mma/* x */.sync.aligned // y\\n .m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\" $MMA_ARGS);
  if (i < n) out[i] = d0 + d1 + d2 + d3;
}"
prec p_mma_f16 fp16 "$SIG
  const unsigned* r = (const unsigned*)a; float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\" $MMA_ARGS);
  if (i < n) out[i] = d0 + d1 + d2 + d3;
}"
prec p_wmma fp16 "$H$SIG
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, (const half*)a, 16);
  wmma::load_matrix_sync(fb, (const half*)b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(out, fc, 16, wmma::mem_row_major);
}"
prec p_half2 fp16 "$H$SIG
  if (i < n) { __half2 h = __floats2half2_rn(a[i], b[i]); h = __hmul2(h, h); out[i] = __low2float(h) + __high2float(h); }
}"
prec p_float2half fp16 "$H$SIG
  if (i < n) out[i] = __half2float(__float2half(a[i] * alpha)) + b[i];
}"
prec p_bfloat16 bf16 "$H$SIG
  if (i < n) out[i] = __bfloat162float(__float2bfloat16(a[i] * alpha)) + b[i];
}"
prec p_dp4a_spelled int8 "$SIG
  if (i < n) out[i] = float(__dp4a(int(a[i]), int(b[i]), 0)) * alpha;
}"
prec p_callee fp16 "$H
__device__ __noinline__ float narrow(float v) { return __half2float(__float2half(v)); }
$SIG
  if (i < n) out[i] = narrow(a[i] * alpha) + b[i];
}"
prec p_function_pointer fp16 "$H
__device__ __noinline__ float narrow(float v) { return __half2float(__float2half(v)); }
__device__ float (*g_narrow)(float) = narrow;
$SIG
  if (i < n) out[i] = g_narrow(a[i] * alpha) + b[i];
}"
# A function reached through an .alias that inline asm injects at module scope (its asm closes the
# kernel's body): the alias leads to the fp16 function.
prec p_alias_injected fp16 "$H
extern \"C\" __device__ __noinline__ float narrow(float v) { return __half2float(__float2half(v)); }
__global__ void keep(float* y) { y[0] = narrow(y[0]); }
__global__ void inj() { asm volatile(\"ret;\\n}\\n.func (.param .b32 r) al (.param .b32 p);\\n.alias al, narrow;\\n.visible .entry inj2()\\n{\\n\"); }
$SIG
  float r;
  asm volatile(\"{ .param .b32 pa; .param .b32 re; st.param.f32 [pa], %1; call.uni (re), al, (pa); ld.param.f32 %0, [re]; }\" : \"=f\"(r) : \"f\"(a[0]));
  if (i < n) out[i] = r + b[i];
}"
# One fp16 kernel the plan never launches: the record stays fp32.
prec p_unlaunched_fp16 fp32 "$H
__global__ void never_launched(__half2* x) { x[threadIdx.x] = __hfma2(x[threadIdx.x], x[threadIdx.x], x[0]); }
@BODY@"

# The device heap, every spelling; the source pattern catches some, the compiled code all.
heap() {
  cand "$1" "$SIG
  $2
  if (i < n) out[i] = a[i] * alpha + b[i];
}"
  no_leak "$1" policy_violation
  field_is "$1" violation.rule device_malloc
}
heap h_malloc 'float* p = (float*)malloc(16); p[0] = 1;'
heap h_token_paste '#define CAT(x, y) x##y
  float* p = (float*)CAT(mal, loc)(16); p[0] = 1;'
heap h_operator_new 'void* p = ::operator new(64); *(float*)p = 1;'
heap h_operator_delete '::operator delete((void*)out);'
heap h_free_parens '(free)((void*)out);'
heap h_new_array 'float* p = new float[4]; p[0] = 1; delete[] p;'
heap h_aligned '#define ALLOC __nv_aligned_device_malloc
  float* p = (float*)ALLOC(64, 16); p[0] = 1;'
heap h_pointer_to_malloc 'void* (*f)(size_t) = malloc; float* p = (float*)f(64); p[0] = 1;'
grep -q 'found in the compiled code' "$T/h_token_paste.out" && pass "h_token_paste: refused from the compiled code" \
  || fail "h_token_paste reason" "$(head -c 300 "$T/h_token_paste.out")"

# A kernel named in the checker's namespace (kernel-prof once left CUPTI records of that name out of
# the sum): refused whether or not the plan launches it.
cand r_scrub_name 'extern "C" __global__ void ca_scrub_shared(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 0; }
@BODY@'
no_leak r_scrub_name policy_violation
field_is r_scrub_name violation.rule reserved_name

# __constant__ memory is module memory: counted with __device__ memory against the cap; a small
# constant table stays legal.
cand m_constant_big '__constant__ float c_big[16384];
__device__ float g_small[16];
@BODY@'
no_leak m_constant_big policy_violation
field_is m_constant_big violation.rule max_module_global_bytes
cand m_constant_lut '__constant__ float c_lut[256] = {2.0f};
__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * c_lut[0] + b[i];
}'
no_leak m_constant_lut compiled

# 5. Plans that bomb the parser: eight nested aliases (each level doubles 9 times), a nesting bomb
#    and oversize text. Each is a plan_error naming the limit, and the record after it is judged.
python3 - > "$T/bombs.jsonl" <<'EOF'
import json
body = "__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = a[i] * alpha + b[i];\n}\n"
plan = "dims: {N: inputs.0.shape[0]}\nforward:\n  - launch: scale_add\n    grid: [cdiv(N, 256)]\n    block: [256]\n    args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n"
task = {"task_id": "adv-bomb", "inputs": [{"name": "a", "shape": [1024], "dtype": "F32"}, {"name": "b", "shape": [1024], "dtype": "F32"}],
        "outputs": [{"shape": [1024], "dtype": "F32"}]}
def rec(cid, p):
    return json.dumps({"task_id": "adv-bomb", "candidate_id": cid, "task": task, "bundle": {"kernels": {"fused.cu": body}, "plan": p}})
lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
for i in range(1, 9):
    prev = "*a%d" % (i - 1)
    lines.append("a%d: &a%d [%s]" % (i, i, ", ".join([prev] * 9)))
alias_bomb = "\n".join(lines) + "\n" + plan
print(rec("alias-bomb", alias_bomb))
print(rec("good-after-alias", plan))
print(rec("nest-bomb", "dims: " + "[" * 200000 + "]" * 200000 + "\n" + plan))
print(rec("good-after-nest", plan))
print(rec("huge-plan", plan + "#" + "x" * (2 << 20) + "\n"))
nested = []
for _ in range(100):
    nested = [nested]
print(rec("json-nest-bomb", {"dims": {"N": "inputs.0.shape[0]"}, "forward": [{"launch": "scale_add", "args": nested}]}))
print(rec("good-last", plan))
EOF
# (the peak resident set of the child, from getrusage: /usr/bin/time is not on every machine)
python3 -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], stdin=open(sys.argv[1] + "/bombs.jsonl"), stdout=open(sys.argv[1] + "/bombs.out", "w"),
                     stderr=open(sys.argv[1] + "/bombs.err", "w"))
open(sys.argv[1] + "/rss", "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)' "$T" "$KC" --compile-only --arch sm_90 --no-store
rc=$?
[ $rc -eq 0 ] && pass "bombs: exit 0 (per-record verdicts)" || fail "bombs exit" "$rc: $(tail -3 "$T/bombs.err")"
python3 - "$T/bombs.out" <<'EOF' && pass "bombs: plan_error naming the limit; the records after them compiled" || fail "bombs" "$(cut -c1-300 "$T/bombs.out")"
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows[r["candidate_id"]] = r["check"]
want = {"alias-bomb": ("plan_error", "limit: plan nodes"), "nest-bomb": ("plan_error", "limit: plan depth"),
        "huge-plan": ("plan_error", "limit: plan size"), "json-nest-bomb": ("plan_error", "limit: plan depth"),
        "good-after-alias": ("compiled", ""), "good-after-nest": ("compiled", ""), "good-last": ("compiled", "")}
assert set(rows) == set(want), sorted(rows)
for cid, (status, sub) in want.items():
    c = rows[cid]
    assert c["status"] == status, (cid, c["status"], c.get("reason"))
    assert sub in c.get("reason", ""), (cid, c.get("reason"))
EOF
rss_kb=$(cat "$T/rss" 2>/dev/null || echo 0)
[ "${rss_kb:-0}" -lt 1000000 ] && pass "bombs: peak RSS ${rss_kb} kB (< 1 GB)" || fail "bombs memory" "peak RSS ${rss_kb} kB"

echo "adversarial_cpu: $failures failed"
[ $failures -eq 0 ]
