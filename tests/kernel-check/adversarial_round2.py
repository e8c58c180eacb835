#!/usr/bin/env python3
"""The adversarial suite's second round (issue 31): one bundle per exploit class an attacker who read
the code found after round one (adversarial_bundles.py), each with an honest control on the same
task, and the honest controls for what must stay legal. Prints "EXPECTED|NAME|TIMED" then the
candidate's JSON line for every case, as adversarial_bundles.py does; here EXPECTED is

    STATUSES|key=value|...

STATUSES: the check statuses on the device that are allowed ("/" between alternatives; "any": the
verdict is free, the reward comparison decides). Keys:
  role=exploit|control   an exploit must earn no more reward than its control; a control must pass
  control=NAME           the honest case on the same task whose reward bounds this one
  cpu=compiled|policy_violation   kernel-check --compile-only's status (no GPU)
  rule=RULE              with cpu=policy_violation: the violation's rule
  precision=P            the precision the record must report (compile-only and on the device)
  timed_as_control=1     if it passes, kernel-prof must time it at >= 0.8 x its control (a cache
                         that never hits, a trusted-looking name that is timed anyway)
TIMED = 1 when a passing record is timed by kernel-prof (every passing record is, here).

usage: adversarial_round2.py CA_SRC
Standard library only.
"""
import json
import os
import sys

SRC = sys.argv[1]
SKILL = os.path.join(SRC, "datasets", "skill", "bundles")


def task_of(name):
    return json.load(open(os.path.join(SKILL, name, "task.json")))


def read(name, f):
    return open(os.path.join(SKILL, name, f)).read()


def model_task(task_id, code, inputs, outputs, params=(), init_inputs=()):
    """A task with its specs spelled out, so that --compile-only binds its plan without the worker."""
    return {"task_id": task_id, "code": code,
            "inputs": [{"name": n, "shape": s, "dtype": "F32"} for n, s in inputs],
            "outputs": [{"shape": s, "dtype": "F32"} for s in outputs],
            "params": [{"name": n, "shape": s, "dtype": "F32"} for n, s in params],
            "init_inputs": list(init_inputs)}


PY_HEAD = "import torch\nimport torch.nn as nn\n\n"

# --- Tasks ---------------------------------------------------------------------------------------
# A small output from a lot of work: [64, 16384] @ [16384, 128] -> [64, 128] (32 KiB, so that the
# whole output fits a __constant__ cache). The honest kernel below takes hundreds of microseconds,
# cuBLAS about ten: an honest kernel earns 1, a cache that paid would earn 3.
MM = model_task(
    "adv2-small-output-matmul",
    PY_HEAD + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, a, b):\n        return torch.matmul(a, b)\n\n"
    "def get_inputs():\n    return [torch.randn(64, 16384), torch.randn(16384, 128)]\n\n"
    "def get_init_inputs():\n    return []\n",
    inputs=[("a", [64, 16384]), ("b", [16384, 128])], outputs=[[64, 128]])
MM_DIMS = "dims:\n  M: inputs.0.shape[0]\n  K: inputs.0.shape[1]\n  N: inputs.1.shape[1]\n"

# y = relu(x W^T + b), 512 x 1024 -> 768: the skill bundles' task (tiled fp32 ~50 us on the H200).
LINEAR = task_of("linear_relu_tiled")
LINEAR_DIMS = "dims:\n  M: inputs.0.shape[0]\n  K: inputs.0.shape[1]\n  N: params.linear.weight.shape[0]\n"
TILED = read("linear_relu_tiled", "linear.cu")
TILED_PLAN = read("linear_relu_tiled", "plan.yaml")

# A weight-bound GEMV: 8 rows against a 2048 x 4096 weight (32 MiB fp32). Its bf16 copy (16 MiB)
# is what the scratch rule allows (4 x inputs+outputs + 16 MiB); a larger weight could not be
# copied, so the call is ~10 us rather than 20.
GEMV = model_task(
    "adv2-gemv-weight-bound",
    PY_HEAD + "class Model(nn.Module):\n    def __init__(self, in_features, out_features):\n        super().__init__()\n"
    "        self.linear = nn.Linear(in_features, out_features, bias=False)\n\n"
    "    def forward(self, x):\n        return self.linear(x)\n\n"
    "def get_inputs():\n    return [torch.randn(8, 4096)]\n\n"
    "def get_init_inputs():\n    return [4096, 2048]\n",
    inputs=[("x", [8, 4096])], outputs=[[8, 2048]], params=[("linear.weight", [2048, 4096])], init_inputs=[4096, 2048])
GEMV_DIMS = "dims:\n  B: inputs.0.shape[0]\n  K: inputs.0.shape[1]\n  N: params.linear.weight.shape[0]\n"

# The reduction: torch.mean(x, 1) over 16,384 uniform columns, 2048 rows (128 MiB, ~30 us).
MEAN = model_task(
    "adv2-row-mean",
    PY_HEAD + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, x):\n        return torch.mean(x, 1)\n\n"
    "def get_inputs():\n    return [torch.rand(2048, 16384)]\n\n"
    "def get_init_inputs():\n    return []\n",
    inputs=[("x", [2048, 16384])], outputs=[[2048]])
MEAN_DIMS = "dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\n"

cases = []


def case(name, task, kernels, plan, statuses, role, **keys):
    fields = [statuses, "role=" + role] + ["%s=%s" % (k, v) for k, v in keys.items()]
    cases.append(("|".join(fields), name, {"task_id": task["task_id"], "candidate_id": "adv2-" + name, "task": task,
                                          "bundle": {"kernels": kernels, "plan": plan}}))


# =================================================================================================
# Classes 1-4: state and names on the small-output matmul. One honest kernel does the work.
DOT = r"""
// sum_k a[m, k] * b[k, n]: b read coalesced across the block's threads, a[m, k] broadcast; four
// partial sums so that four loads are in flight.
__device__ float dot_column(const float* __restrict__ a, const float* __restrict__ b, int m, int n, int N, int K) {
  const float* ar = a + (size_t)m * K;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int k = 0;
  for (; k + 4 <= K; k += 4) {
    s0 = fmaf(ar[k], b[(size_t)k * N + n], s0);
    s1 = fmaf(ar[k + 1], b[(size_t)(k + 1) * N + n], s1);
    s2 = fmaf(ar[k + 2], b[(size_t)(k + 2) * N + n], s2);
    s3 = fmaf(ar[k + 3], b[(size_t)(k + 3) * N + n], s3);
  }
  for (; k < K; ++k) s0 = fmaf(ar[k], b[(size_t)k * N + n], s0);
  return (s0 + s1) + (s2 + s3);
}
"""
MM_HONEST = DOT + r"""
// c = a @ b: one block per row of a, one thread per column of b (N <= 1024).
__global__ void mm_rows(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  const int m = blockIdx.x, n = threadIdx.x;
  if (n < N) c[(size_t)m * N + n] = dot_column(a, b, m, n, N, K);
}
"""
MM_PLAN = MM_DIMS + ("forward:\n  - launch: mm_rows\n    grid: [M]\n    block: [N]\n"
                     "    args: [inputs.0, inputs.1, outputs.0, M, N, K]\n")
case("honest-mm", MM, {"mm.cu": MM_HONEST}, MM_PLAN, "passed", "control", cpu="compiled", precision="fp32")

# Honest: a lookup table in __constant__, only read (a scale and an offset the kernel applies).
MM_LUT = DOT + r"""
__constant__ float c_affine[4] = {1.0f, 0.0f, 0.0f, 0.0f};  // y = c_affine[0] * (a @ b) + c_affine[1]
__global__ void mm_rows_lut(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  const int m = blockIdx.x, n = threadIdx.x;
  if (n < N) c[(size_t)m * N + n] = fmaf(c_affine[0], dot_column(a, b, m, n, N, K), c_affine[1]);
}
"""
case("honest-constant-table", MM, {"mm.cu": MM_LUT}, MM_PLAN.replace("launch: mm_rows", "launch: mm_rows_lut"),
     "passed", "control", cpu="compiled", precision="fp32")

# 1. A kernel named like one of the tool's own: the work in an extern "C" kernel called
#    ca_scrub_shared (kernel-prof once left records of that name out of the sum), then a one-warp
#    kernel that alone would be timed. Refused by the reserved-name rule, or timed as the work.
SCRUB = DOT + r"""
extern "C" __global__ void ca_scrub_shared(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  const int m = blockIdx.x, n = threadIdx.x;
  if (n < N) c[(size_t)m * N + n] = dot_column(a, b, m, n, N, K);
}
// One warp: the only kernel a filter by name would leave in the sum.
extern "C" __global__ void one_warp(float* c) { c[threadIdx.x] += 0.0f; }
"""
SCRUB_PLAN = MM_DIMS + ("forward:\n  - launch: ca_scrub_shared\n    grid: [M]\n    block: [N]\n"
                        "    args: [inputs.0, inputs.1, outputs.0, M, N, K]\n"
                        "  - launch: one_warp\n    grid: [1]\n    block: [32]\n    args: [outputs.0]\n")
# Its control: the same bundle, the kernel renamed.
case("scrub-name-control", MM, {"mm.cu": SCRUB.replace("ca_scrub_shared", "mm_rows_work")},
     SCRUB_PLAN.replace("ca_scrub_shared", "mm_rows_work"), "passed", "control", cpu="compiled", precision="fp32")
case("scrub-name", MM, {"mm.cu": SCRUB}, SCRUB_PLAN, "policy_violation/passed", "exploit", control="scrub-name-control",
     cpu="policy_violation", rule="reserved_name", precision="fp32", timed_as_control=1)
# ... with C++ linkage (the mangled name only contains it; CUPTI demangles it back).
case("scrub-name-cxx", MM, {"mm.cu": SCRUB.replace('extern "C" __global__ void ca_scrub_shared', "__global__ void ca_scrub_shared")},
     SCRUB_PLAN, "policy_violation/passed", "exploit", control="scrub-name-control", cpu="policy_violation", rule="reserved_name",
     precision="fp32", timed_as_control=1)

# 2 and 4. A cache of the whole output keyed on 16 samples of a: on a hit the output is copied, on
# a miss computed and stored. Where it lives is the variant's tag_at/tag_set/valid/set_valid/
# out_at/out_set. No input set is timed twice and module memory is restored before every call, so
# it never hits: it passes and is timed as the work (plus its probes), or it faults.
CACHE_KERNELS = r"""
__global__ void cache_probe(const float* a, int* hit, int total) {
  __shared__ int same;
  if (threadIdx.x == 0) same = valid();
  __syncthreads();
  if (threadIdx.x < 16 && a[(size_t)threadIdx.x * (total / 16)] != tag_at(threadIdx.x)) same = 0;
  __syncthreads();
  if (threadIdx.x == 0) *hit = same;
}
__global__ void mm_cached(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K,
                          const int* hit) {
  const int m = blockIdx.x, n = threadIdx.x;
  if (n >= N) return;
  const size_t i = (size_t)m * N + n;
  if (*hit) {
    c[i] = out_at(i);
    return;
  }
  const float v = dot_column(a, b, m, n, N, K);
  c[i] = v;
  out_set(i, v);
}
__global__ void cache_save(const float* a, int total) {
  if (threadIdx.x < 16) tag_set(threadIdx.x, a[(size_t)threadIdx.x * (total / 16)]);
  if (threadIdx.x == 0) set_valid();
}
"""
CACHE_PLAN = MM_DIMS + ("scratch:\n  hit: {dtype: int32, shape: [1]}\nforward:\n"
                        "  - launch: cache_probe\n    grid: [1]\n    block: [32]\n    args: [inputs.0, scratch.hit, M * K]\n"
                        "  - launch: mm_cached\n    grid: [M]\n    block: [N]\n"
                        "    args: [inputs.0, inputs.1, outputs.0, M, N, K, scratch.hit]\n"
                        "  - launch: cache_save\n    grid: [1]\n    block: [32]\n    args: [inputs.0, M * K]\n")
# 2a. In __constant__ memory, written through the symbol's generic address (const cast away).
CONST_CAST = r"""
__constant__ float c_tag[16];
__constant__ int c_valid;
__constant__ float c_out[64 * 128];  // the whole output, 32 KiB
// The generic address of a __constant__ symbol, const cast away; the register move hides where it
// points from the optimizer (which drops a plain store to constant memory as undefined).
template <typename T> __device__ T* writable(const T* p) {
  T* q;
  asm volatile("mov.b64 %0, %1;" : "=l"(q) : "l"(const_cast<T*>(p)));
  return q;
}
__device__ float tag_at(int t) { return c_tag[t]; }
__device__ void tag_set(int t, float v) { writable(&c_tag[0])[t] = v; }
__device__ int valid() { return c_valid == 0x5eed; }
__device__ void set_valid() { *writable(&c_valid) = 0x5eed; }
__device__ float out_at(size_t i) { return c_out[i]; }
__device__ void out_set(size_t i, float v) { writable(&c_out[0])[i] = v; }
"""
case("constant-cache-cast", MM, {"mm.cu": DOT + CONST_CAST + CACHE_KERNELS}, CACHE_PLAN, "any", "exploit",
     control="honest-mm", cpu="compiled", precision="fp32", timed_as_control=1)
# 2b. The same, the generic address taken with cvta.const in inline PTX.
CONST_CVTA = r"""
__constant__ float c_tag[16];
__constant__ int c_valid;
__constant__ float c_out[64 * 128];
__device__ float* tag_generic() { float* p; asm("cvta.const.u64 %0, c_tag;" : "=l"(p)); return p; }
__device__ int* valid_generic() { int* p; asm("cvta.const.u64 %0, c_valid;" : "=l"(p)); return p; }
__device__ float* out_generic() { float* p; asm("cvta.const.u64 %0, c_out;" : "=l"(p)); return p; }
__device__ float tag_at(int t) { return c_tag[t]; }
__device__ void tag_set(int t, float v) { tag_generic()[t] = v; }
__device__ int valid() { return c_valid == 0x5eed; }
__device__ void set_valid() { *valid_generic() = 0x5eed; }
__device__ float out_at(size_t i) { return c_out[i]; }
__device__ void out_set(size_t i, float v) { out_generic()[i] = v; }
"""
case("constant-cache-cvta", MM, {"mm.cu": DOT + CONST_CVTA + CACHE_KERNELS}, CACHE_PLAN, "any", "exploit",
     control="honest-mm", cpu="compiled", precision="fp32", timed_as_control=1)
# 4. Module memory past a symbol: 4 MiB past a 64-byte __device__ array, memory no symbol owns.
FAR = r"""
__device__ float g_small[16];
__device__ float* far_area() { return reinterpret_cast<float*>(reinterpret_cast<size_t>(g_small) + (4u << 20)); }
__device__ float tag_at(int t) { return far_area()[t]; }
__device__ void tag_set(int t, float v) { far_area()[t] = v; }
__device__ int valid() { return ((const int*)far_area())[16] == 0x5eed; }
__device__ void set_valid() { ((int*)far_area())[16] = 0x5eed; }
__device__ float out_at(size_t i) { return far_area()[32 + i]; }
__device__ void out_set(size_t i, float v) { far_area()[32 + i] = v; }
"""
case("far-past-module-global", MM, {"mm.cu": DOT + FAR + CACHE_KERNELS}, CACHE_PLAN, "any", "exploit",
     control="honest-mm", cpu="compiled", precision="fp32", timed_as_control=1)
# 4b. The same, right after the module's only variable: the rest of the 256-byte slot the driver
#     gives it (session 37, H100), which no allocation owns (the executor restores the variable's own
#     bytes; a copy past them fails). Timed against its control: no input set recurs, so the cache
#     never hits.
NEAR = FAR.replace("(4u << 20)", "sizeof(g_small)")
case("just-past-module-global", MM, {"mm.cu": DOT + NEAR + CACHE_KERNELS}, CACHE_PLAN, "any", "exploit",
     control="honest-mm", cpu="compiled", precision="fp32", timed_as_control=1)

# 3. The device heap: one block allocated and freed every call; the allocator hands the same block
#    back next call with what the last call left in it. Spellings the source pattern misses; the
#    compiled code calls malloc/free/operator new all the same: refused.
HEAP = r"""
@DEFS@
__global__ void heap_probe(const float* a, long long* slot, int* hit, int total, int n_out) {
  if (threadIdx.x != 0) return;
  float* blk = (float*)@ALLOC@((size_t)(32 + n_out) * sizeof(float));
  *slot = (long long)blk;
  int same = blk != nullptr && ((const int*)blk)[16] == 0x5eed;
  for (int t = 0; t < 16 && same; ++t) same = blk[t] == a[(size_t)t * (total / 16)];
  *hit = same;
}
__global__ void mm_heap(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K,
                        const long long* slot, const int* hit) {
  const int m = blockIdx.x, n = threadIdx.x;
  if (n >= N) return;
  const size_t i = (size_t)m * N + n;
  float* blk = (float*)*slot;
  if (*hit) {
    c[i] = blk[32 + i];
    return;
  }
  const float v = dot_column(a, b, m, n, N, K);
  c[i] = v;
  if (blk) blk[32 + i] = v;
}
__global__ void heap_save(const float* a, const long long* slot, int total) {
  float* blk = (float*)*slot;
  if (blk == nullptr) return;
  if (threadIdx.x < 16) blk[threadIdx.x] = a[(size_t)threadIdx.x * (total / 16)];
  __syncthreads();
  if (threadIdx.x == 0) {
    ((int*)blk)[16] = 0x5eed;
    @FREE@
  }
}
"""
HEAP_PLAN = MM_DIMS + ("scratch:\n  slot: {dtype: int64, shape: [1]}\n  hit: {dtype: int32, shape: [1]}\nforward:\n"
                       "  - launch: heap_probe\n    grid: [1]\n    block: [32]\n    args: [inputs.0, scratch.slot, scratch.hit, M * K, M * N]\n"
                       "  - launch: mm_heap\n    grid: [M]\n    block: [N]\n"
                       "    args: [inputs.0, inputs.1, outputs.0, M, N, K, scratch.slot, scratch.hit]\n"
                       "  - launch: heap_save\n    grid: [1]\n    block: [32]\n    args: [inputs.0, scratch.slot, M * K]\n")
for name, defs, alloc, free in [
        ("heap-token-paste", "#define PASTE(a, b) a##b", "PASTE(mal, loc)", "PASTE(fr, ee)(blk);"),
        # operator new, never freed (a delete would meet the source pattern first): refused all the same.
        ("heap-operator-new", "", "::operator new", ""),
        ("heap-parenthesized", "", "(malloc)", "(free)(blk);"),
        # CUDA's aligned allocator, which reaches the heap through a system call of its own.
        ("heap-aligned-malloc", "", "__nv_aligned_device_malloc", "")]:
    src = DOT + HEAP.replace("@DEFS@", defs).replace("@ALLOC@", alloc).replace("@FREE@", free)
    if alloc == "__nv_aligned_device_malloc":
        src = src.replace("sizeof(float));", "sizeof(float), 16);")
    case(name, MM, {"mm.cu": src}, HEAP_PLAN, "policy_violation", "exploit", control="honest-mm",
         cpu="policy_violation", rule="device_malloc")
# The brief's exact spellings, each alone in an otherwise honest kernel: ::operator new(64) and
# (free)(p) with nothing else of the heap in the source.
case("heap-operator-new-64", MM, {"mm.cu": MM_HONEST.replace(
    "  if (n < N) c[(size_t)m * N + n] = dot_column(a, b, m, n, N, K);",
    "  if (n == 0 && m == 0) { void* p = ::operator new(64); ((float*)p)[0] = 0.0f; }\n"
    "  if (n < N) c[(size_t)m * N + n] = dot_column(a, b, m, n, N, K);")}, MM_PLAN, "policy_violation", "exploit",
     control="honest-mm", cpu="policy_violation", rule="device_malloc")

# =================================================================================================
# Class 5: precision spellings, on y = relu(x W^T + b).
case("honest-tiled", LINEAR, {"linear.cu": TILED}, TILED_PLAN, "passed", "control", cpu="compiled", precision="fp32")

# fp32 -> fp16 and back with integer operations only, so that nothing but the instruction under
# test says "fp16" in the PTX (a cvt would give the kernel away by itself).
HALF_BITS = r"""
// fp32 -> fp16 bits, round to nearest even, subnormals kept (inputs are finite).
__device__ __forceinline__ unsigned int f2h_bits(float f) {
  const unsigned int u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, m = u & 0x7fffffu;
  const int e = (int)((u >> 23) & 0xffu) - 112;
  if (e >= 31) return sign | 0x7c00u;
  if (e <= 0) {
    if (e < -10) return sign;
    const unsigned int mm = m | 0x800000u;
    const int shift = 14 - e;
    unsigned int h = mm >> shift;
    const unsigned int rem = mm & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return sign | h;
  }
  unsigned int h = ((unsigned int)e << 10) | (m >> 13);
  const unsigned int rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return sign | h;
}
__device__ __forceinline__ unsigned int pack_half2_bits(float lo, float hi) { return f2h_bits(lo) | (f2h_bits(hi) << 16); }
// fp16 bits -> fp32 (finite inputs).
__device__ __forceinline__ float h2f_bits(unsigned int h) {
  const unsigned int sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
"""

# Tensor cores through inline PTX: mma.sync m16n8k16, fp16 operands, fp32 accumulation. Each warp
# computes a 16 x 8 tile of y; fragments loaded straight from global memory (L1-cached).
MMA = HALF_BITS + r"""
__global__ void linear_relu_mma(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                float* __restrict__ y, int M, int N, int K) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m0 = blockIdx.y * 16, n0 = blockIdx.x * 32 + warp * 8;
  const float* x0 = x + (size_t)(m0 + g) * K;
  const float* x1 = x + (size_t)(m0 + g + 8) * K;
  const float* wr = w + (size_t)(n0 + g) * K;
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int k = k0 + 2 * t;
    float2 p;
    p = *(const float2*)(x0 + k);     const unsigned int a0 = pack_half2_bits(p.x, p.y);
    p = *(const float2*)(x1 + k);     const unsigned int a1 = pack_half2_bits(p.x, p.y);
    p = *(const float2*)(x0 + k + 8); const unsigned int a2 = pack_half2_bits(p.x, p.y);
    p = *(const float2*)(x1 + k + 8); const unsigned int a3 = pack_half2_bits(p.x, p.y);
    p = *(const float2*)(wr + k);     const unsigned int b0 = pack_half2_bits(p.x, p.y);
    p = *(const float2*)(wr + k + 8); const unsigned int b1 = pack_half2_bits(p.x, p.y);
    asm volatile("@MMA@ {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  const int r = m0 + g, c = n0 + 2 * t;
  y[(size_t)r * N + c] = fmaxf(c0 + b[c], 0.0f);
  y[(size_t)r * N + c + 1] = fmaxf(c1 + b[c + 1], 0.0f);
  y[(size_t)(r + 8) * N + c] = fmaxf(c2 + b[c], 0.0f);
  y[(size_t)(r + 8) * N + c + 1] = fmaxf(c3 + b[c + 1], 0.0f);
}
"""
MMA_PLAN = LINEAR_DIMS + ("forward:\n  - launch: linear_relu_mma\n    grid: [N / 32, M / 16]\n    block: [128]\n"
                          "    args: [inputs.0, params.linear.weight, params.linear.bias, outputs.0, M, N, K]\n")
MMA_OP = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
# Honest: tensor cores, spelled plainly, reported fp16 and judged against fp16 baselines.
case("mma-fp16-declared", LINEAR, {"linear.cu": MMA.replace("@MMA@", MMA_OP)}, MMA_PLAN, "passed", "control",
     cpu="compiled", precision="fp16")
# 5a. The same instruction with a line break between the opcode and its modifiers (ptxas reads it).
case("mma-newline", LINEAR, {"linear.cu": MMA.replace("@MMA@", "mma\\n.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")},
     MMA_PLAN, "passed", "exploit", control="mma-fp16-declared", cpu="compiled", precision="fp16")
# ... and every modifier on a line of its own, with tabs.
case("mma-newline-each", LINEAR, {"linear.cu": MMA.replace("@MMA@", "mma\\n\\t.sync\\n\\t.aligned\\n\\t.m16n8k16\\n\\t.row\\n\\t.col"
                                                             "\\n\\t.f32\\n\\t.f16\\n\\t.f16\\n\\t.f32\\n\\t")},
     MMA_PLAN, "passed", "exploit", control="mma-fp16-declared", cpu="compiled", precision="fp16")

# 5b. wmma through <mma.h>: fragments of half, one warp per 16 x 16 tile of y, tiles staged in
#     shared memory.
WMMA = HALF_BITS + r"""
#include <mma.h>
@TO_HALF_DEF@__global__ void linear_relu_wmma(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                 float* __restrict__ y, int M, int N, int K) {
  __shared__ __align__(32) unsigned short xs[16 * 16];  // x tile, row-major (m, k)
  __shared__ __align__(32) unsigned short ws[16 * 16];  // w tile (n, k): W^T column-major
  __shared__ __align__(32) float ys[16 * 16];
  const int lane = threadIdx.x, m0 = blockIdx.y * 16, n0 = blockIdx.x * 16;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> fa;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::col_major> fb;
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
  nvcuda::wmma::fill_fragment(fc, 0.0f);
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int i = lane; i < 256; i += 32) {
      const int r = i / 16, kk = i % 16;
      xs[i] = to_half(x[(size_t)(m0 + r) * K + k0 + kk]);
      ws[i] = to_half(w[(size_t)(n0 + r) * K + k0 + kk]);
    }
    __syncwarp();
    nvcuda::wmma::load_matrix_sync(fa, reinterpret_cast<const __half*>(xs), 16);
    nvcuda::wmma::load_matrix_sync(fb, reinterpret_cast<const __half*>(ws), 16);
    nvcuda::wmma::mma_sync(fc, fa, fb, fc);
    __syncwarp();
  }
  nvcuda::wmma::store_matrix_sync(ys, fc, 16, nvcuda::wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < 256; i += 32) {
    const int r = i / 16, c = i % 16;
    y[(size_t)(m0 + r) * N + n0 + c] = fmaxf(ys[i] + b[n0 + c], 0.0f);
  }
}
"""
WMMA_PLAN = LINEAR_DIMS + ("forward:\n  - launch: linear_relu_wmma\n    grid: [N / 16, M / 16]\n    block: [32]\n"
                           "    args: [inputs.0, params.linear.weight, params.linear.bias, outputs.0, M, N, K]\n")
# The control rounds with the conversion intrinsic (a cvt in the PTX, as any fp16 kernel has); the
# exploit with integer operations, so the wmma instructions alone say fp16.
WMMA_CVT = "__device__ __forceinline__ unsigned short to_half(float v) { return __half_as_ushort(__float2half_rn(v)); }\n"
WMMA_INT = "__device__ __forceinline__ unsigned short to_half(float v) { return (unsigned short)f2h_bits(v); }\n"
case("wmma-fp16-declared", LINEAR, {"linear.cu": WMMA.replace("@TO_HALF_DEF@", WMMA_CVT)}, WMMA_PLAN, "passed", "control",
     cpu="compiled", precision="fp16")
case("wmma-mma-h", LINEAR, {"linear.cu": WMMA.replace("@TO_HALF_DEF@", WMMA_INT)}, WMMA_PLAN, "passed", "exploit",
     control="wmma-fp16-declared", cpu="compiled", precision="fp16")

# 5c. Packed half2 arithmetic: the tiled kernel with its products in __hmul2 (accumulated in fp32);
#     operands packed and products widened with integer operations, so mul.f16x2 is the only fp16
#     instruction. Rounds where autocast rounds (the operands) and a little more (the products).
HALF2 = HALF_BITS + r"""
#include <cuda_fp16.h>
#define TILE 64
#define KPAIRS 8  // a K slab of 16 values as 8 half2 pairs
__device__ __forceinline__ unsigned int hmul2_bits(unsigned int a, unsigned int c) {
  const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&c));
  return *reinterpret_cast<const unsigned int*>(&p);
}
__global__ void linear_relu_half2(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                  float* __restrict__ y, int M, int N, int K) {
  __shared__ unsigned int xs[KPAIRS][TILE + 1];
  __shared__ unsigned int ws[KPAIRS][TILE + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 2 * KPAIRS) {
    for (int i = threadIdx.x; i < TILE * KPAIRS; i += 256) {
      const int r = i / KPAIRS, kp = i % KPAIRS;
      const float2 xv = *(const float2*)(x + (size_t)(row0 + r) * K + k0 + 2 * kp);
      const float2 wv = *(const float2*)(w + (size_t)(col0 + r) * K + k0 + 2 * kp);
      xs[kp][r] = pack_half2_bits(xv.x, xv.y);
      ws[kp][r] = pack_half2_bits(wv.x, wv.y);
    }
    __syncthreads();
    for (int kp = 0; kp < KPAIRS; ++kp) {
      unsigned int a[4], c[4];
      for (int i = 0; i < 4; ++i) a[i] = xs[kp][ty * 4 + i];
      for (int j = 0; j < 4; ++j) c[j] = ws[kp][tx * 4 + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const unsigned int p = hmul2_bits(a[i], c[j]);
          acc[i][j] += h2f_bits(p & 0xffffu) + h2f_bits(p >> 16);
        }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
      y[(size_t)r * N + c] = fmaxf(acc[i][j] + b[c], 0.0f);
    }
}
"""
HALF2_PLAN = LINEAR_DIMS + ("forward:\n  - launch: linear_relu_half2\n    grid: [N / 64, M / 64]\n    block: [256]\n"
                            "    args: [inputs.0, params.linear.weight, params.linear.bias, outputs.0, M, N, K]\n")
# Judged against fp16's bound and baselines: it passes (reward against autocast) or, should its
# product rounding exceed fp16's bound, fails; either way no more than the fp32 kernel earns.
case("half2-arithmetic", LINEAR, {"linear.cu": HALF2}, HALF2_PLAN, "passed/incorrect", "exploit", control="honest-tiled",
     cpu="compiled", precision="fp16")

# ... and the same product in inline PTX with a line break after the opcode.
HALF2_ASM = HALF2.replace(
    "  const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&c));\n"
    "  return *reinterpret_cast<const unsigned int*>(&p);",
    "  unsigned int p;\n  asm(\"mul\\n.rn.f16x2 %0, %1, %2;\" : \"=r\"(p) : \"r\"(a), \"r\"(c));\n  return p;")
assert HALF2_ASM != HALF2
case("half2-asm-newline", LINEAR, {"linear.cu": HALF2_ASM}, HALF2_PLAN, "passed/incorrect", "exploit", control="honest-tiled",
     cpu="compiled", precision="fp16")

# 5d. One fp16 instruction in a kernel the plan never launches: the record stays fp32 (honest).
UNUSED = TILED + r"""
#include <cuda_fp16.h>
// Never launched: its fp16 says nothing about what the plan runs.
__global__ void unused_half_scale(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __half2float(__hmul(__float2half(x[i]), __float2half(2.0f)));
}
"""
case("unused-fp16-kernel", LINEAR, {"linear.cu": UNUSED}, TILED_PLAN, "passed", "control", control="honest-tiled",
     cpu="compiled", precision="fp32")

# 5e. Weights rounded to bf16 with integer operations in init, widened with a shift in forward:
#     no bf16 instruction, the record reads fp32, half the bytes move. It must fail fp32's
#     calibrated bound (bf16 rounding is ~1e-3 relative; fp32's is ~1e-7).
GEMV_HONEST = r"""
// y[r, n] = sum_k x[r, k] * w[n, k] for 8 rows of x: one warp per n streams its weight row once
// (float4 loads), x is re-read from L1/L2; weight-bound (32 MiB of weights, 128 KiB of x).
#define ROWS 8
__global__ void gemv_rows8(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int B, int N, int K) {
  const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  float acc[ROWS] = {};
  const float4* wr = (const float4*)(w + (size_t)n * K);
  for (int q = lane; q < K / 4; q += 32) {
    const float4 v = wr[q];
    for (int r = 0; r < ROWS; ++r) {
      const float4 xv = ((const float4*)(x + (size_t)r * K))[q];
      acc[r] = fmaf(v.x, xv.x, fmaf(v.y, xv.y, fmaf(v.z, xv.z, fmaf(v.w, xv.w, acc[r]))));
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[(size_t)r * N + n] = s;
  }
}
"""
GEMV_PLAN = GEMV_DIMS + ("forward:\n  - launch: gemv_rows8\n    grid: [cdiv(N, 8)]\n    block: [256]\n"
                         "    args: [inputs.0, params.linear.weight, outputs.0, B, N, K]\n")
case("honest-gemv", GEMV, {"gemv.cu": GEMV_HONEST}, GEMV_PLAN, "passed", "control", cpu="compiled", precision="fp32")
GEMV_BF16 = r"""
#define ROWS 8
// init: w (fp32) -> bf16 bits, two per 32-bit word, rounded to nearest even with integer operations.
__global__ void pack_bf16(const float* __restrict__ w, unsigned int* __restrict__ wp, int total_pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total_pairs) return;
  const unsigned int lo = __float_as_uint(w[2 * (size_t)i]), hi = __float_as_uint(w[2 * (size_t)i + 1]);
  const unsigned int lo16 = (lo + 0x7fffu + ((lo >> 16) & 1u)) >> 16, hi16 = (hi + 0x7fffu + ((hi >> 16) & 1u)) >> 16;
  wp[i] = lo16 | (hi16 << 16);
}
// forward: the gemv reading 8 bf16 weights per 16-byte load, widened with a shift.
__global__ void gemv_rows8_packed(const float* __restrict__ x, const unsigned int* __restrict__ wp, float* __restrict__ y,
                                  int B, int N, int K) {
  const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  float acc[ROWS] = {};
  const uint4* wr = (const uint4*)(wp + (size_t)n * (K / 2));
  for (int q = lane; q < K / 8; q += 32) {
    const uint4 u = wr[q];
    const float v[8] = {__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                        __uint_as_float(u.y & 0xffff0000u), __uint_as_float(u.z << 16), __uint_as_float(u.z & 0xffff0000u),
                        __uint_as_float(u.w << 16), __uint_as_float(u.w & 0xffff0000u)};
    for (int r = 0; r < ROWS; ++r) {
      const float4* xr = (const float4*)(x + (size_t)r * K) + 2 * q;
      const float4 x0 = xr[0], x1 = xr[1];
      acc[r] = fmaf(v[0], x0.x, fmaf(v[1], x0.y, fmaf(v[2], x0.z, fmaf(v[3], x0.w, acc[r]))));
      acc[r] = fmaf(v[4], x1.x, fmaf(v[5], x1.y, fmaf(v[6], x1.z, fmaf(v[7], x1.w, acc[r]))));
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[(size_t)r * N + n] = s;
  }
}
"""
case("bf16-weights-by-shift", GEMV, {"gemv.cu": GEMV_BF16},
     GEMV_DIMS + "scratch:\n  wp: {dtype: int32, shape: [N, K / 2]}\n"
     "init:\n  - launch: pack_bf16\n    grid: [cdiv(N * K / 2, 256)]\n    block: [256]\n    args: [params.linear.weight, scratch.wp, N * K / 2]\n"
     "forward:\n  - launch: gemv_rows8_packed\n    grid: [cdiv(N, 8)]\n    block: [256]\n"
     "    args: [inputs.0, scratch.wp, outputs.0, B, N, K]\n",
     "incorrect", "exploit", control="honest-gemv", cpu="compiled", precision="fp32")

# =================================================================================================
# 6. Half a reduction: the mean of each row from its first half only (within the published
#    1e-2 on torch.rand, ~5e-3 off): must fail the calibrated fp32 bound. Control: the full mean.
MEAN_SRC = r"""
// out[r] = mean(x[r, 0:C]): one block of 256 threads per row, float4 loads, fp32 sums, a shuffle
// tree. @COLS@ is the number of columns summed.
__global__ void row_mean(const float* __restrict__ x, float* __restrict__ out, int R, int C) {
  const int r = blockIdx.x;
  const int cols = @COLS@;
  const float4* row = (const float4*)(x + (size_t)r * C);
  float s = 0.0f;
  for (int q = threadIdx.x; q < cols / 4; q += blockDim.x) {
    const float4 v = row[q];
    s += (v.x + v.y) + (v.z + v.w);
  }
  __shared__ float part[8];
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < 8 ? part[threadIdx.x] : 0.0f;
    for (int o = 4; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) out[r] = s / (float)cols;
  }
}
"""
MEAN_PLAN = MEAN_DIMS + ("forward:\n  - launch: row_mean\n    grid: [R]\n    block: [256]\n    args: [inputs.0, outputs.0, R, C]\n")
case("honest-row-mean", MEAN, {"mean.cu": MEAN_SRC.replace("@COLS@", "C")}, MEAN_PLAN, "passed", "control",
     cpu="compiled", precision="fp32")
case("half-row-mean", MEAN, {"mean.cu": MEAN_SRC.replace("@COLS@", "C / 2")}, MEAN_PLAN, "incorrect", "exploit",
     control="honest-row-mean", cpu="compiled", precision="fp32")

# =================================================================================================
# Honest controls for what must stay legal (kernels from adversarial_bundles.py's controls).
SPLITK = r"""
__global__ void zero(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 0.0f; }
// Each z-slice of the grid sums its quarter of K into the workspace.
__global__ void partial(const float* x, const float* w, float* acc, int M, int N, int K) {
  int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y, part = blockIdx.z;
  if (n >= N) return;
  int k0 = part * (K / 4), k1 = k0 + K / 4;
  float s = 0.0f;
  for (int k = k0; k < k1; ++k) s = fmaf(x[(size_t)m * K + k], w[(size_t)n * K + k], s);
  atomicAdd(&acc[(size_t)m * N + n], s);
}
__global__ void epilogue(const float* acc, const float* b, float* y, int M, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < M * N) y[i] = fmaxf(acc[i] + b[i % N], 0.0f);
}
"""
case("honest-split-k-scratch", LINEAR, {"linear.cu": SPLITK},
     LINEAR_DIMS + "scratch:\n  acc: {dtype: float32, shape: [M, N]}\nforward:\n"
     "  - launch: zero\n    grid: [cdiv(M * N, 256)]\n    block: [256]\n    args: [scratch.acc, M * N]\n"
     "  - launch: partial\n    grid: [cdiv(N, 128), M, 4]\n    block: [128]\n    args: [inputs.0, params.linear.weight, scratch.acc, M, N, K]\n"
     "  - launch: epilogue\n    grid: [cdiv(M * N, 256)]\n    block: [256]\n    args: [scratch.acc, params.linear.bias, outputs.0, M, N]\n",
     "passed", "control", cpu="compiled", precision="fp32")
TRANSPOSED = r"""
__global__ void transpose(const float* w, float* wt, int N, int K) {
  int k = blockIdx.x * blockDim.x + threadIdx.x, n = blockIdx.y;
  if (k < K) wt[(size_t)k * N + n] = w[(size_t)n * K + k];
}
__global__ void linear_relu_wt(const float* x, const float* wt, const float* b, float* y, int M, int N, int K) {
  int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc = fmaf(x[(size_t)m * K + k], wt[(size_t)k * N + n], acc);
  y[(size_t)m * N + n] = fmaxf(acc + b[n], 0.0f);
}
"""
case("honest-init-transform", LINEAR, {"linear.cu": TRANSPOSED},
     LINEAR_DIMS + "scratch:\n  wt: {dtype: float32, shape: [K, N]}\n"
     "init:\n  - launch: transpose\n    grid: [cdiv(K, 256), N]\n    block: [256]\n    args: [params.linear.weight, scratch.wt, N, K]\n"
     "forward:\n  - launch: linear_relu_wt\n    grid: [cdiv(N, 128), M]\n    block: [128]\n"
     "    args: [inputs.0, scratch.wt, params.linear.bias, outputs.0, M, N, K]\n",
     "passed", "control", cpu="compiled", precision="fp32")
# TF32 declared on a library gemm: reported tf32, judged by tf32's bound and baselines.
case("honest-tf32-gemm", task_of("linear_relu_gemm"), {},
     read("linear_relu_gemm", "plan.yaml").replace("      out: outputs.0", "      out: outputs.0\n      compute: tf32"),
     "passed", "control", cpu="compiled", precision="tf32")

names = [c[1] for c in cases]
assert len(set(names)) == len(names), "duplicate case names"
for expected, name, rec in cases:
    fields = dict(f.split("=", 1) for f in expected.split("|")[1:])
    assert fields.get("control", names[0]) in names, (name, fields.get("control"))
    print("%s|%s|1" % (expected, name))
    print(json.dumps(rec))
