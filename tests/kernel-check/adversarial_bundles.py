#!/usr/bin/env python3
"""The adversarial suite's GPU bundles (issue 16): one per exploit class, each with the verdict it
must get, and the honest controls that must pass. Prints "EXPECTED|NAME|TIMED" then the candidate's
JSON line, for every case; TIMED = 1 when kernel-prof must time it too (its time must stay that of
the honest kernel: a cache cannot pay).

usage: adversarial_bundles.py CA_SRC
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


LINEAR = task_of("linear_relu_tiled")
SCALE = task_of("scale_add")
TILED = read("linear_relu_tiled", "linear.cu")
LINEAR_DIMS = "dims:\n  M: inputs.0.shape[0]\n  K: inputs.0.shape[1]\n  N: params.linear.weight.shape[0]\n"
SCALE_SRC = read("scale_add", "fused.cu")
SCALE_PLAN = read("scale_add", "plan.yaml")

# A task whose outputs are small everywhere (|y| < 1e-2): zeros pass allclose at atol 1e-2.
SMALL = {
    "task_id": "adv-small-outputs",
    "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n\n    def forward(self, x):\n        return x * 1e-3\n\n"
            "def get_inputs():\n    return [torch.randn(65536)]\n\ndef get_init_inputs():\n    return []\n",
}
SMALL_PLAN = ("dims: {N: inputs.0.shape[0]}\nforward:\n  - launch: scale\n    grid: [cdiv(N, 256)]\n    block: [256]\n"
              "    args: [inputs.0, outputs.0, N]\n")

cases = []


def case(expected, name, task, kernels, plan, timed=False):
    cases.append((expected, name, timed, {"task_id": task["task_id"], "candidate_id": "adv-" + name, "task": task,
                                          "bundle": {"kernels": kernels, "plan": plan}}))


# --- Memo by an input sample (the reported exploit): 64 sampled values of x compared with those the
# last call saved; on a match the cached output is copied instead of computed. The cache lives in
# forward's scratch, poisoned before every call: it never matches, the kernel always computes.
MEMO_KERNELS = r"""
__global__ void memo_probe(const float* x, const float* saved, int* flag, int total) {
  __shared__ int same;
  if (threadIdx.x == 0) same = 1;
  __syncthreads();
  if (x[(size_t)threadIdx.x * (total / 64)] != saved[threadIdx.x]) same = 0;
  __syncthreads();
  if (threadIdx.x == 0) *flag = same;
}
__global__ void memo_save(const float* x, float* saved, int total) { saved[threadIdx.x] = x[(size_t)threadIdx.x * (total / 64)]; }
__global__ void memo_cache(float* y, float* cache, const int* flag, int total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  if (*flag) y[i] = cache[i]; else cache[i] = y[i];
}
"""
TILED_SKIPPING = TILED.replace("float* __restrict__ y, int M, int N, int K) {",
                               "float* __restrict__ y, int M, int N, int K, const int* flag) {\n  if (*flag) return;")
assert TILED_SKIPPING != TILED
MEMO_FORWARD = """forward:
  - launch: memo_probe
    grid: [1]
    block: [64]
    args: [inputs.0, scratch.saved, scratch.flag, M * K]
  - launch: linear_relu_tiled
    grid: [cdiv(N, 64), cdiv(M, 64)]
    block: [256]
    args: [inputs.0, params.linear.weight, params.linear.bias, outputs.0, M, N, K, scratch.flag]
  - launch: memo_cache
    grid: [cdiv(M * N, 256)]
    block: [256]
    args: [outputs.0, scratch.cache, scratch.flag, M * N]
  - launch: memo_save
    grid: [1]
    block: [64]
    args: [inputs.0, scratch.saved, M * K]
"""
MEMO_SCRATCH = ("scratch:\n  saved: {dtype: float32, shape: [64]}\n  flag: {dtype: int32, shape: [1]}\n"
                "  cache: {dtype: float32, shape: [M, N]}\n")
case("passed", "memo-sample-forward-scratch", LINEAR, {"linear.cu": TILED_SKIPPING + MEMO_KERNELS},
     LINEAR_DIMS + MEMO_SCRATCH + MEMO_FORWARD, timed=True)

# The same cache declared as init's scratch (an init step zero-fills it): forward writing it is refused.
ZERO = "__global__ void zero_fill(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 0.0f; }\n"
case("incorrect|which init wrote", "memo-sample-init-scratch", LINEAR, {"linear.cu": TILED_SKIPPING + MEMO_KERNELS + ZERO},
     LINEAR_DIMS + MEMO_SCRATCH + "init:\n  - launch: zero_fill\n    grid: [cdiv(M * N, 256)]\n    block: [256]\n"
     "    args: [scratch.cache, M * N]\n" + MEMO_FORWARD)

# Memo by pointer: the input's address saved by the last call; a match means "same inputs".
PTR_KERNELS = MEMO_KERNELS.replace("__global__ void memo_probe(", "__global__ void memo_probe_unused(") + r"""
__global__ void memo_probe(const float* x, const long long* saved, int* flag, int total) {
  *flag = (*saved == (long long)x);
}
__global__ void memo_save_ptr(const float* x, long long* saved) { *saved = (long long)x; }
"""
PTR_FORWARD = MEMO_FORWARD.replace("args: [inputs.0, scratch.saved, scratch.flag, M * K]",
                                   "args: [inputs.0, scratch.ptr, scratch.flag, M * K]").replace(
    "  - launch: memo_save\n    grid: [1]\n    block: [64]\n    args: [inputs.0, scratch.saved, M * K]\n",
    "  - launch: memo_save_ptr\n    grid: [1]\n    block: [1]\n    args: [inputs.0, scratch.ptr]\n")
case("passed", "memo-pointer", LINEAR, {"linear.cu": TILED_SKIPPING + PTR_KERNELS},
     LINEAR_DIMS + MEMO_SCRATCH + "  ptr: {dtype: int64, shape: [1]}\n" + PTR_FORWARD, timed=True)

# Memo by call count, in a module global: restored to its load-time 0 before every call.
COUNT_KERNELS = MEMO_KERNELS.replace("__global__ void memo_probe(", "__global__ void memo_probe_unused(") + r"""
__device__ int g_calls;
__global__ void memo_probe(const float* x, const float* saved, int* flag, int total) { *flag = g_calls > 0; g_calls += 1; }
"""
case("passed", "memo-call-count-global", LINEAR, {"linear.cu": TILED_SKIPPING + COUNT_KERNELS},
     LINEAR_DIMS + MEMO_SCRATCH + MEMO_FORWARD, timed=True)

# Memo in shared memory, which no buffer holds and no kernel clears: each block keeps its share of
# the output in slots of its (uninitialized) shared memory, tagged by a sample of x and its block
# index; a later call on the same inputs that finds its tag copies the slot instead of computing.
# One block per SM (149 KB each), 12 slots: room for every timed input set. The checker fills all
# shared memory with words drawn for each call, so no tag survives and the kernel always computes.
# Measured on the H200 with binaries built without that scrub, this bundle's cache did not hit
# either (1660.7 us, the naive compute): kernel-prof's L2 flush, a memset, overwrites all but 1.6%
# of shared memory (bench/smem_probe.py). The scrub itself is proved directly by the case in
# tests/kernel-prof/gpu_measure_test.cpp; this case keeps the attack's verdict and timing honest.
SMEM_MEMO = r"""
#define SLOTS 12
#define TAG 18
__global__ void smem_memo_linear_relu(const float* x, const float* w, const float* b, float* y, int M, int N, int K) {
  extern __shared__ float sm[];
  __shared__ float want[TAG];
  __shared__ int hit;
  const int chunk = (M * N) / gridDim.x, stride = TAG + chunk, tid = threadIdx.x;
  if (tid < 16) want[tid] = x[((size_t)tid * 104729u) % ((size_t)M * K)];
  if (tid == 16) want[16] = (float)blockIdx.x;
  if (tid == 17) want[17] = 1234.5f;
  if (tid == 0) hit = -1;
  __syncthreads();
  if (tid < SLOTS) {
    bool same = true;
    for (int j = 0; j < TAG; ++j) same = same && sm[tid * stride + j] == want[j];
    if (same) atomicMax(&hit, tid);
  }
  __syncthreads();
  const size_t base = (size_t)blockIdx.x * chunk;
  if (hit >= 0) {
    for (int i = tid; i < chunk; i += blockDim.x) y[base + i] = sm[hit * stride + TAG + i];
    return;
  }
  const int slot = (__float_as_uint(want[0]) >> 7) % SLOTS;
  for (int i = tid; i < chunk; i += blockDim.x) {
    const size_t idx = base + i;
    const int m = idx / N, n = idx % N;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = fmaf(x[(size_t)m * K + k], w[(size_t)n * K + k], acc);
    const float v = fmaxf(acc + b[n], 0.0f);
    y[idx] = v;
    sm[slot * stride + TAG + i] = v;
  }
  __syncthreads();
  if (tid < TAG) sm[slot * stride + tid] = want[tid];
}
"""
# 128 blocks of 3072 outputs (512 x 768 / 128); 12 slots of 18 + 3072 floats = 148,320 bytes.
case("passed", "memo-shared-memory", LINEAR, {"linear.cu": SMEM_MEMO},
     LINEAR_DIMS + "forward:\n  - launch: smem_memo_linear_relu\n    grid: [128]\n    block: [512]\n"
     "    shared: 148320\n    args: [inputs.0, params.linear.weight, params.linear.bias, outputs.0, M, N, K]\n", timed=True)

# Results that would depend on the previous call through a module global: restored, so they do not.
# (The bump is a second step, after the whole first kernel: within one launch it would race.)
GLOBAL_COUNTER = SCALE_SRC.replace("__global__ void scale_add", "__device__ float g_bias;\n__global__ void bump() { g_bias += 1.0f; }\n"
                                   "__global__ void scale_add").replace(
    "if (i < n) out[i] = a[i] * alpha + b[i];", "if (i < n) out[i] = a[i] * alpha + b[i] + g_bias;")
assert GLOBAL_COUNTER != SCALE_SRC
case("passed", "global-state-restored", SCALE, {"fused.cu": GLOBAL_COUNTER},
     SCALE_PLAN + "  - launch: bump\n    grid: [1]\n    block: [1]\n    args: []\n")

# A cache written far past the end of an output, inside the same allocation granule.
FAR = SCALE_SRC.replace("if (i < n) out[i]", "if (i == 0) out[n + 300000] = 1.0f;\n  if (i < n) out[i]")
case("incorrect|wrote past the end of outputs.0", "write-far-past-output", SCALE, {"fused.cu": FAR}, SCALE_PLAN)
# ... and one written into an input.
INPUT = SCALE_SRC.replace("if (i < n) out[i] = a[i] * alpha + b[i];",
                          "if (i < n) { out[i] = a[i] * alpha + b[i]; if (i == 7) ((float*)a)[n - 1] = 42.0f; }")
case("incorrect|changed inputs.0", "cache-in-input", SCALE, {"fused.cu": INPUT}, SCALE_PLAN)

# Zero output where every reference value is below atol: the relative error norm fails it.
case("incorrect|relative error norm", "zeros-on-small-outputs", SMALL,
     {"k.cu": "__global__ void scale(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 0.0f; }\n"},
     SMALL_PLAN)

# --- Honest controls: legitimate scratch, init-time weight transforms, split-K workspaces.
case("passed", "honest-tiled", LINEAR, {"linear.cu": TILED}, read("linear_relu_tiled", "plan.yaml"), timed=True)
case("passed", "honest-small-outputs", SMALL,
     {"k.cu": "__global__ void scale(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * 1e-3f; }\n"},
     SMALL_PLAN)
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
case("passed", "honest-init-transpose", LINEAR, {"linear.cu": TRANSPOSED},
     LINEAR_DIMS + "scratch:\n  wt: {dtype: float32, shape: [K, N]}\n"
     "init:\n  - launch: transpose\n    grid: [cdiv(K, 256), N]\n    block: [256]\n    args: [params.linear.weight, scratch.wt, N, K]\n"
     "forward:\n  - launch: linear_relu_wt\n    grid: [cdiv(N, 128), M]\n    block: [128]\n"
     "    args: [inputs.0, scratch.wt, params.linear.bias, outputs.0, M, N, K]\n")
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
case("passed", "honest-split-k-workspace", LINEAR, {"linear.cu": SPLITK},
     LINEAR_DIMS + "scratch:\n  acc: {dtype: float32, shape: [M, N]}\nforward:\n"
     "  - launch: zero\n    grid: [cdiv(M * N, 256)]\n    block: [256]\n    args: [scratch.acc, M * N]\n"
     "  - launch: partial\n    grid: [cdiv(N, 128), M, 4]\n    block: [128]\n    args: [inputs.0, params.linear.weight, scratch.acc, M, N, K]\n"
     "  - launch: epilogue\n    grid: [cdiv(M * N, 256)]\n    block: [256]\n    args: [scratch.acc, params.linear.bias, outputs.0, M, N]\n")
LUT = SCALE_SRC.replace("__global__ void scale_add", "__device__ float g_lut[2] = {1.0f, 0.0f};\n__global__ void scale_add").replace(
    "out[i] = a[i] * alpha + b[i];", "out[i] = a[i] * alpha * g_lut[0] + b[i] + g_lut[1];")
case("passed", "honest-module-table", SCALE, {"fused.cu": LUT}, SCALE_PLAN)

# Lower precision: a TF32 gemm; kernel-prof times precision-matched baselines, the reward uses them.
case("passed|tf32", "tf32-gemm", task_of("linear_relu_gemm"), {},
     read("linear_relu_gemm", "plan.yaml").replace("      out: outputs.0", "      out: outputs.0\n      compute: tf32"))

# --- What the compiled code is (issue 31). A kernel named in the checker's namespace (kernel-prof
# once left CUPTI records named ca_scrub_shared out of the sum): refused, launched or not.
SCRUB_NAMED = TILED.replace("__global__ void linear_relu_tiled(", 'extern "C" __global__ void ca_scrub_shared(')
assert SCRUB_NAMED != TILED
case("policy_violation", "reserved-name-scrub", LINEAR,
     {"linear.cu": SCRUB_NAMED + "__global__ void one_warp(float* y) { if (threadIdx.x == 0) y[0] = y[0]; }\n"},
     read("linear_relu_tiled", "plan.yaml").replace("launch: linear_relu_tiled", "launch: ca_scrub_shared") +
     "  - launch: one_warp\n    grid: [1]\n    block: [32]\n    args: [outputs.0]\n")

# The device heap kept across calls, spelled so no source pattern sees it: refused from the PTX.
HEAP = SCALE_SRC.replace("__global__ void scale_add", "__device__ float* g_block;\n__global__ void scale_add").replace(
    "if (i < n) out[i] = a[i] * alpha + b[i];",
    "if (i == 0 && !g_block) g_block = (float*)::operator new(4096);\n  if (i < n) out[i] = a[i] * alpha + b[i];")
assert HEAP != SCALE_SRC
case("policy_violation", "heap-operator-new", SCALE, {"fused.cu": HEAP}, SCALE_PLAN)

# A cache in __constant__ memory, written through the generic address of its symbol and keyed on a
# sample of the input: restored to its load-time bytes before every call (and no input set repeats),
# so it never hits; timed as the honest row sum it then is. Output 4,096 floats: the cache fits the
# 64 KiB module cap.
ROWSUM = {
    "task_id": "adv-row-sum",
    "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n\n    def forward(self, x):\n        return x.sum(dim=1)\n\n"
            "def get_inputs():\n    return [torch.rand(4096, 8192)]\n\ndef get_init_inputs():\n    return []\n",
}
ROWSUM_KERNEL = r"""
__global__ void row_sum(const float* x, float* y, int rows, int cols, const int* hit) {
  if (hit && *hit) return;
  __shared__ float part[256];
  const float* row = x + (size_t)blockIdx.x * cols;
  float s = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += row[j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}
"""
ROWSUM_DIMS = "dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\n"
HONEST_ROWSUM = ROWSUM_KERNEL.replace(", const int* hit) {\n  if (hit && *hit) return;", ") {")
assert HONEST_ROWSUM != ROWSUM_KERNEL
case("passed", "honest-row-sum", ROWSUM, {"k.cu": HONEST_ROWSUM},
     ROWSUM_DIMS + "forward:\n  - launch: row_sum\n    grid: [R]\n    block: [256]\n    args: [inputs.0, outputs.0, R, C]\n",
     timed=True)
CONST_CACHE = ROWSUM_KERNEL + r"""
__constant__ float c_tag[16];
__constant__ float c_out[4096];
__device__ __forceinline__ float* generic_tag() { unsigned long long p; asm volatile("cvta.const.u64 %0, c_tag;" : "=l"(p)); return (float*)p; }
__device__ __forceinline__ float* generic_out() { unsigned long long p; asm volatile("cvta.const.u64 %0, c_out;" : "=l"(p)); return (float*)p; }
__global__ void probe(const float* x, int total, int* hit) {
  __shared__ int same;
  if (threadIdx.x == 0) same = 1;
  __syncthreads();
  if (threadIdx.x < 16 && x[(size_t)threadIdx.x * (total / 16)] != c_tag[threadIdx.x]) same = 0;
  __syncthreads();
  if (threadIdx.x == 0) *hit = same;
}
__global__ void serve_or_save(const float* x, float* y, int rows, int total, const int* hit) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  if (*hit) y[i] = c_out[i];
  else generic_out()[i] = y[i];
  if (i < 16) generic_tag()[i] = x[(size_t)i * (total / 16)];
}
"""
case("passed", "constant-cache-row-sum", ROWSUM, {"k.cu": CONST_CACHE},
     ROWSUM_DIMS + "scratch:\n  hit: {dtype: int32, shape: [1]}\nforward:\n"
     "  - launch: probe\n    grid: [1]\n    block: [32]\n    args: [inputs.0, R * C, scratch.hit]\n"
     "  - launch: row_sum\n    grid: [R]\n    block: [256]\n    args: [inputs.0, outputs.0, R, C, scratch.hit]\n"
     "  - launch: serve_or_save\n    grid: [cdiv(R, 256)]\n    block: [256]\n    args: [inputs.0, outputs.0, R, R * C, scratch.hit]\n",
     timed=True)

# Results that would depend on the previous call through __constant__ memory written through its
# generic address (the bump is a second step): restored before every call, so they do not.
CONST_COUNTER = SCALE_SRC.replace("__global__ void scale_add", "__constant__ float c_bias;\n"
                                  "__global__ void bump() { float* p; asm volatile(\"cvta.const.u64 %0, c_bias;\" : \"=l\"(p)); *p += 1.0f; }\n"
                                  "__global__ void scale_add").replace(
    "if (i < n) out[i] = a[i] * alpha + b[i];", "if (i < n) out[i] = a[i] * alpha + b[i] + c_bias;")
assert CONST_COUNTER != SCALE_SRC
case("passed", "constant-state-restored", SCALE, {"fused.cu": CONST_COUNTER},
     SCALE_PLAN + "  - launch: bump\n    grid: [1]\n    block: [1]\n    args: []\n")

# Honest controls: a lookup table in __constant__ memory; an fp16 kernel the plan never launches
# leaves the record fp32.
CONST_LUT = SCALE_SRC.replace("__global__ void scale_add", "__constant__ float c_lut[2] = {1.0f, 0.0f};\n__global__ void scale_add").replace(
    "out[i] = a[i] * alpha + b[i];", "out[i] = a[i] * alpha * c_lut[0] + b[i] + c_lut[1];")
case("passed", "honest-constant-table", SCALE, {"fused.cu": CONST_LUT}, SCALE_PLAN)
UNLAUNCHED = "#include <cuda_fp16.h>\n__global__ void never_launched(__half2* x) { x[threadIdx.x] = __hfma2(x[0], x[1], x[2]); }\n" + SCALE_SRC
case("passed|fp32", "unlaunched-fp16-kernel", SCALE, {"fused.cu": UNLAUNCHED}, SCALE_PLAN)

# --- A free start value (session 20): outputs used to start every call as 0xFF bytes (NaN, -1, true),
# so a kernel could skip writing the elements whose reference is that value: the NaN of a log of a
# negative input (half of a randn tensor), the true of a comparison that is almost always true. They
# now start as bytes drawn for the call: the skipping kernels are incorrect, their honest twins pass.
def elementwise_task(task_id, forward):
    return {"task_id": task_id,
            "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n\n    def forward(self, x):\n        return " + forward + "\n\n"
                    "def get_inputs():\n    return [torch.randn(1 << 20)]\n\ndef get_init_inputs():\n    return []\n"}


ELEMENTWISE_PLAN = ("dims: {N: inputs.0.shape[0]}\nforward:\n  - launch: ew\n    grid: [cdiv(N, 256)]\n    block: [256]\n"
                    "    args: [inputs.0, outputs.0, N]\n")
LOG = elementwise_task("adv-log-randn", "torch.log(x)")
LOG_SKIP = ("__global__ void ew(const float* x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  if (i < n && x[i] >= 0.0f) y[i] = logf(x[i]);  // NaN where x < 0: left to the fill\n}\n")
case("incorrect|nan, got", "nan-start-skipped", LOG, {"k.cu": LOG_SKIP}, ELEMENTWISE_PLAN)
case("passed", "honest-log", LOG, {"k.cu": LOG_SKIP.replace("if (i < n && x[i] >= 0.0f)", "if (i < n)")}, ELEMENTWISE_PLAN)
MOSTLY_TRUE = elementwise_task("adv-mostly-true", "x > -3.0")
TRUE_SKIP = ("__global__ void ew(const float* x, bool* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < n && !(x[i] > -3.0f)) y[i] = false;  // 99.9% true: left to the fill\n}\n")
case("incorrect|expected 1, got 0", "true-start-skipped", MOSTLY_TRUE, {"k.cu": TRUE_SKIP}, ELEMENTWISE_PLAN)
case("passed", "honest-mostly-true", MOSTLY_TRUE,
     {"k.cu": TRUE_SKIP.replace("if (i < n && !(x[i] > -3.0f)) y[i] = false;", "if (i < n) y[i] = x[i] > -3.0f;")}, ELEMENTWISE_PLAN)

# --- Red team R10 (session 20), H1: a task whose code names float32 (`.float()` on a buffer, a no-op in
# fp32) made the float64 calibration raise, and every call fell back to the published 5e-2, which half
# a row's mean meets (4.5e-3). The float64 run now lifts the dtypes the code names: the calibrated
# bound judges and the half mean is incorrect; the whole-row mean passes.
def task_code(task_id, ctor, forward, inputs):
    return {"task_id": task_id,
            "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n" + ctor + "\n    def forward(self, x):\n        return " + forward + "\n\n"
                    "def get_inputs():\n    return [" + inputs + "]\n\ndef get_init_inputs():\n    return []\n"}


MEAN_SPELLED = task_code("adv-mean-float-spelled", "        self.register_buffer(\"w\", torch.full((16384, 1), 1.0 / 16384))\n",
                         "torch.matmul(x, self.w.float()).squeeze(1)", "torch.rand(2048, 16384)")
ROW_MEAN = r"""
__global__ void row_mean(const float* __restrict__ x, float* __restrict__ y, int cols, int cols_read, float div) {
  const float* r = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int c = threadIdx.x; c < cols_read; c += blockDim.x) s += r[c];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __shared__ float part[32];
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) y[blockIdx.x] = t / div;
  }
}
"""


def row_mean_plan(cols_read, div):
    return ("dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nforward:\n  - launch: row_mean\n    grid: [R]\n"
            "    block: [512]\n    args: [inputs.0, outputs.0, C, %s, %s]\n" % (cols_read, div))


case("incorrect|calibrated bound", "half-mean-float-spelled", MEAN_SPELLED, {"k.cu": ROW_MEAN}, row_mean_plan("C / 2", "8192.0"))
case("passed", "honest-mean-float-spelled", MEAN_SPELLED, {"k.cu": ROW_MEAN}, row_mean_plan("C", "16384.0"))

# --- R10's H4: clamp(x, max=-6.6) on randn is -6.6 on every plain draw; a shifted variant moves it.
# A kernel that samples its input, computes on what looks like a variant and writes the constant
# otherwise is exact everywhere kernel-prof times. The task is now task_insensitive (on its own
# draws): neither the detector nor the honest clamp is judged, so neither earns anything.
CLAMP_TASK = task_code("adv-clamp-constant", "", "torch.clamp(x, max=-6.6)", "torch.randn(4096, 4096)")
CLAMP_KERNELS = r"""
__global__ void clamp_all(const float* __restrict__ x, float* __restrict__ y, long long n, float hi) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fminf(x[i], hi);
}
// flag = 1 unless 16,384 samples look like randn (mean within 0.08, variance within 0.1 of 1).
__global__ void looks_plain(const float* __restrict__ x, long long n, int* __restrict__ flag) {
  __shared__ float s1[32], s2[32];
  float a = 0.f, b = 0.f;
  for (int k = threadIdx.x; k < 16384; k += blockDim.x) { const float v = x[(long long)k * (n / 16384)]; a += v; b += v * v; }
  for (int o = 16; o > 0; o >>= 1) { a += __shfl_xor_sync(0xffffffffu, a, o); b += __shfl_xor_sync(0xffffffffu, b, o); }
  if ((threadIdx.x & 31) == 0) { s1[threadIdx.x >> 5] = a; s2[threadIdx.x >> 5] = b; }
  __syncthreads();
  if (threadIdx.x == 0) {
    float A = 0.f, B = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) { A += s1[w]; B += s2[w]; }
    const float mean = A / 16384.f, var = B / 16384.f - mean * mean;
    *flag = (fabsf(mean) > 0.08f || fabsf(var - 1.f) > 0.1f) ? 1 : 0;
  }
}
__global__ void clamp_or_constant(const float* __restrict__ x, float* __restrict__ y, long long n, const int* __restrict__ flag,
                                  float hi) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = *flag ? fminf(x[i], hi) : hi;
}
"""
case("task_insensitive", "constant-on-plain-draws", CLAMP_TASK, {"k.cu": CLAMP_KERNELS},
     "dims: {N: inputs.0.numel}\nscratch:\n  flag: {dtype: int32, shape: [1]}\nforward:\n"
     "  - launch: looks_plain\n    grid: [1]\n    block: [1024]\n    args: [inputs.0, N, scratch.flag]\n"
     "  - launch: clamp_or_constant\n    grid: [cdiv(N, 256)]\n    block: [256]\n    args: [inputs.0, outputs.0, N, scratch.flag, -6.6]\n")
case("task_insensitive", "honest-clamp-constant-task", CLAMP_TASK, {"k.cu": CLAMP_KERNELS},
     "dims: {N: inputs.0.numel}\nforward:\n  - launch: clamp_all\n    grid: [cdiv(N, 256)]\n    block: [256]\n"
     "    args: [inputs.0, outputs.0, N, -6.6]\n")

# --- R10's H3: a Linear whose bias is 200 on every element. The fp32 floor (3e-5) was pooled over
# ||out||, which the bias makes ~350x the product's: weights cut to bf16 inside the kernel (by integer
# masking: it reads as fp32) put the product ~3e-3 off and the output only 8.5e-6 off, within the
# floor. The floor is now scaled by the part of the output the inputs move (3e-3 here, at least a
# tenth): 3.2e-6 on this task. The truncating kernel is incorrect, the same kernel without it passes.
BIASED = task_code("adv-linear-bias-200", "        self.linear = nn.Linear(1024, 1024)\n"
                   "        with torch.no_grad():\n            self.linear.bias.fill_(200.0)\n",
                   "self.linear(x)", "torch.randn(64, 1024)")
BIASED_GEMV = r"""
__device__ __forceinline__ float weight(float w) {
#ifdef TRUNCATE_TO_BF16
  return __uint_as_float(__float_as_uint(w) & 0xffff0000u);  // bf16's 8 bits, as fp32
#else
  return w;
#endif
}
__global__ void linear_rows(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                            float* __restrict__ y, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  const float* xr = x + (size_t)m * K;
  const float* wr = w + (size_t)n * K;
  float s = 0.f;
  for (int k = 0; k < K; ++k) s = fmaf(xr[k], weight(wr[k]), s);
  y[(size_t)m * N + n] = s + b[n];
}
"""
BIASED_PLAN = (LINEAR_DIMS + "forward:\n  - launch: linear_rows\n    grid: [cdiv(N, 128), M]\n    block: [128]\n"
               "    args: [inputs.0, params.linear.weight, params.linear.bias, outputs.0, M, N, K]\n")
case("incorrect|the part of the output's norm the inputs move", "bf16-weights-bias-diluted", BIASED,
     {"k.cu": "#define TRUNCATE_TO_BF16\n" + BIASED_GEMV}, BIASED_PLAN)
case("passed", "honest-linear-bias-200", BIASED, {"k.cu": BIASED_GEMV}, BIASED_PLAN)

# --- R11's paramstore: an init step that writes into a param. Params were hashed only after init,
# so what init stored there (a collapsed W2 W1, any table of any size) was outside the scratch cap
# and never compared with the task's. Params are now hashed before and after init: the in-place
# transpose is incorrect; the same transpose into scratch (init's place for it) passes.
SQUARE = task_code("adv-linear-1024-square", "        self.linear = nn.Linear(1024, 1024)\n", "self.linear(x)",
                   "torch.randn(64, 1024)")
TRANSPOSED = r"""
__global__ void transpose_in_place(float* w, int n) {  // swaps (i, j) and (j, i) for i < j
  const int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j <= i || j >= n) return;
  const float a = w[(size_t)i * n + j];
  w[(size_t)i * n + j] = w[(size_t)j * n + i];
  w[(size_t)j * n + i] = a;
}
__global__ void transpose_to(const float* __restrict__ w, float* __restrict__ wt, int n) {
  const int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) wt[(size_t)j * n + i] = w[(size_t)i * n + j];
}
__global__ void linear_t(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ b,
                         float* __restrict__ y, int M, int N, int K) {  // wt: [K, N]
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float s = 0.f;
  for (int k = 0; k < K; ++k) s = fmaf(x[(size_t)m * K + k], wt[(size_t)k * N + n], s);
  y[(size_t)m * N + n] = s + b[n];
}
"""
LINEAR_T = ("forward:\n  - launch: linear_t\n    grid: [cdiv(N, 128), M]\n    block: [128]\n"
            "    args: [inputs.0, %s, params.linear.bias, outputs.0, M, N, K]\n")
case("incorrect|init changed params.linear.weight", "init-writes-param", SQUARE, {"k.cu": TRANSPOSED},
     LINEAR_DIMS + "init:\n  - launch: transpose_in_place\n    grid: [cdiv(K, 128), K]\n    block: [128]\n"
     "    args: [params.linear.weight, K]\n" + LINEAR_T % "params.linear.weight")
case("passed", "honest-init-transpose-to-scratch", SQUARE, {"k.cu": TRANSPOSED},
     LINEAR_DIMS + "scratch:\n  wt: {dtype: float32, shape: [K, N]}\n"
     "init:\n  - launch: transpose_to\n    grid: [cdiv(K, 128), N]\n    block: [128]\n"
     "    args: [params.linear.weight, scratch.wt, K]\n" + LINEAR_T % "scratch.wt")

# --- R11's rowidx: integer inputs were never varied, so a structure every draw of them has was never
# challenged: gather(x, 1, idx) with one permutation repeated down the rows, where a kernel that reads
# only idx's first row is exact on every plain draw. shift_scale and outliers now shuffle integer
# tensors (the same values, other places): the first-row kernel is incorrect there, the honest
# gather passes.
GATHER_TASK = {"task_id": "adv-gather-repeated-permutation",
               "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                       "        super().__init__()\n\n    def forward(self, x, idx):\n        return torch.gather(x, 1, idx)\n\n"
                       "def get_inputs():\n    return [torch.randn(512, 2048), torch.randperm(2048).repeat(512, 1)]\n\n"
                       "def get_init_inputs():\n    return []\n"}
GATHER = r"""
__global__ void gather_cols(const float* __restrict__ x, const long long* __restrict__ idx, float* __restrict__ y, int R, int C) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < (size_t)R * C) y[i] = x[(i / C) * C + idx[i]];
}
__global__ void gather_cols_row0(const float* __restrict__ x, const long long* __restrict__ idx, float* __restrict__ y, int R, int C) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;  // idx's first row for every row
  if (i < (size_t)R * C) y[i] = x[(i / C) * C + idx[i % C]];
}
"""
GATHER_PLAN = ("dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nforward:\n  - launch: %s\n    grid: [cdiv(R * C, 256)]\n"
               "    block: [256]\n    args: [inputs.0, inputs.1, outputs.0, R, C]\n")
case("incorrect|variant", "index-rows-alike", GATHER_TASK, {"k.cu": GATHER}, GATHER_PLAN % "gather_cols_row0")
case("passed", "honest-gather", GATHER_TASK, {"k.cu": GATHER}, GATHER_PLAN % "gather_cols")

# --- R11's fixed16 (R10's H2): weights as 16-bit fixed point with a scale per row, widened by integer
# shifts (no narrow-float instruction: the record reads fp32), are ~1.5e-5 off on a Linear of 4096
# inputs, under the old fp32 floor 3e-5 at half the bytes (on the H100: reward 3, 4.2x over eager).
# The floor is 5e-6 now (every honest bundle judged on the device needed none of it): incorrect.
# The serial GEMV of R10's pair above, on the fp32 weights, passes.
WIDE = task_code("adv-linear-4096-1024", "        self.linear = nn.Linear(4096, 1024)\n", "self.linear(x)",
                 "torch.randn(16, 4096)")
FIXED16 = r"""
__global__ void quantize_rows(const float* __restrict__ w, short* __restrict__ q, float* __restrict__ scale, int K) {
  __shared__ float red[256];
  const float* r = w + (size_t)blockIdx.x * K;
  float mx = 0.f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) mx = fmaxf(mx, fabsf(r[k]));
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float inv = red[0] > 0.f ? 32767.f / red[0] : 0.f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) q[(size_t)blockIdx.x * K + k] = (short)__float2int_rn(r[k] * inv);
  if (threadIdx.x == 0) scale[blockIdx.x] = red[0] > 0.f ? red[0] / 32767.f : 1.f;
}
__global__ void gemv_fixed16(const float* __restrict__ x, const short* __restrict__ q, const float* __restrict__ scale,
                             const float* __restrict__ b, float* __restrict__ y, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  const int* r = reinterpret_cast<const int*>(q + (size_t)n * K);  // two weights a word, widened by shifts
  const float* xr = x + (size_t)m * K;
  float s = 0.f;
  for (int k = 0; k < K / 2; ++k) {
    const int w = r[k];
    s = fmaf(xr[2 * k], (float)((w << 16) >> 16), s);
    s = fmaf(xr[2 * k + 1], (float)(w >> 16), s);
  }
  y[(size_t)m * N + n] = fmaf(s, scale[n], b[n]);
}
"""
case("incorrect|calibrated bound", "fixed16-weights", WIDE, {"k.cu": FIXED16},
     LINEAR_DIMS + "scratch:\n  wq: {dtype: int16, shape: [N, K]}\n  ws: {dtype: float32, shape: [N]}\n"
     "init:\n  - launch: quantize_rows\n    grid: [N]\n    block: [256]\n    args: [params.linear.weight, scratch.wq, scratch.ws, K]\n"
     "forward:\n  - launch: gemv_fixed16\n    grid: [cdiv(N, 128), M]\n    block: [128]\n"
     "    args: [inputs.0, scratch.wq, scratch.ws, params.linear.bias, outputs.0, M, N, K]\n")
case("passed", "honest-gemv-f32", WIDE, {"k.cu": BIASED_GEMV}, BIASED_PLAN)  # R10's serial GEMV, fp32 weights

# --- The elementwise allowance (692ab1f): on an output whose fp32 reference itself misses the
# published gate against float64 on n elements, a candidate may miss it on up to 8 n (at most 1e-4 of
# the output) while the calibrated norm bound holds; and on up to 1% more within atol + 8 x the
# reference's largest error against float64 (the slack). (a + b) - a with a = randn^9 (a few |a| ~ 1e6)
# loses b's low bits in fp32 on ~15 of 1M elements (by up to ~0.06); the exact kernel (y = b, half the
# bytes) misses the published gate there and passes by the slack. An exploit that spends them on
# elements it does not compute (zeros on 16) fails the norm; one that is 3.0 off on 300 elements
# (past the slack) fails the count. 16, not more: the count allowance is 8 x the reference's own
# misses, which vary with the draw (4 to 13 seen; session 38's H100 drew 4, so 32 allowed, and zeros
# on 48 missed on 36 and failed the count first); 16 zeros stay inside it unless the reference
# misses on one element or none, and their norm error, sqrt(16 / 2^20) = 0.0039, is 2.8x the
# largest plain bound seen (0.0014). Which gate the reason names depends on the draw, so the verdict
# is asserted here and the norm's catch in adversarial_gpu.sh (a trial over its calibrated bound).
CANCEL = {"task_id": "adv-cancel-heavy-tail",
          "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                  "        super().__init__()\n\n    def forward(self, a, b):\n        return (a + b) - a\n\n"
                  "def get_inputs():\n    return [torch.randn(1 << 20) ** 9, torch.randn(1 << 20)]\n\n"
                  "def get_init_inputs():\n    return []\n"}
CANCEL_KERNEL = r"""
__global__ void ew(const float* __restrict__ b, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
#if defined(ZERO_TAIL)
  y[i] = i >= n - 16 ? 0.f : b[i];            // 16 elements never computed
#elif defined(OFF_HEAD)
  y[i] = i < 300 ? b[i] + 3.0f : b[i];        // 300 elements 3.0 off: past the slack and the count
#else
  y[i] = b[i];                                // (a + b) - a, exactly
#endif
}
"""
CANCEL_PLAN = ("dims: {N: inputs.1.shape[0]}\nforward:\n  - launch: ew\n    grid: [cdiv(N, 256)]\n    block: [256]\n"
               "    args: [inputs.1, outputs.0, N]\n")
case("incorrect|outputs.0", "allowance-spent-on-zeros", CANCEL, {"k.cu": "#define ZERO_TAIL\n" + CANCEL_KERNEL}, CANCEL_PLAN)
case("incorrect|allowed", "allowance-exceeded", CANCEL, {"k.cu": "#define OFF_HEAD\n" + CANCEL_KERNEL}, CANCEL_PLAN)
case("passed", "honest-exact-cancel", CANCEL, {"k.cu": CANCEL_KERNEL}, CANCEL_PLAN)

for expected, name, timed, rec in cases:
    print("%s|%s|%d" % (expected, name, 1 if timed else 0))
    print(json.dumps(rec))
