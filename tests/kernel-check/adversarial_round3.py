#!/usr/bin/env python3
"""The adversarial suite's third round (issue 31's CPU bar): every spelling of reduced precision, of
the device heap and of the checker's reserved kernel names that an attacker who read the code could
try, each a bundle kernel-check --compile-only judges without a GPU. Precision must be what the GPU
executes, whatever the spelling; the heap spellings must be policy violations (device_malloc); a
kernel named in the ca_ namespace must be refused (reserved_name). Honest controls show what stays
legal (tensor cores declared fp16, TF32 declared, a lookup table in __constant__, placement new on a
scratch buffer).

The kernels are probes, not solutions: most compute nothing the task asks for, so this round is for
the CPU only (adversarial_round2.py's exploits carry the device's reward comparisons). Prints
"EXPECTED|NAME|0" then the candidate's JSON line for every case, in adversarial_round2.py's format;
EXPECTED is

    cpu=compiled|precision=P                 compiled, the plan bound, check.precision == P
    cpu=policy_violation|rule=RULE           refused by RULE
    cpu=compile_error                        the compiler refuses the spelling (not a hole)

usage: adversarial_round3.py CA_SRC
Standard library only.
"""
import json
import os
import sys

SRC = sys.argv[1]
SKILL = os.path.join(SRC, "datasets", "skill", "bundles")

# y = 2 x over [256, 1024]: every probe kernel is one thread per element.
SCALE = {"task_id": "adv3-scale", "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
         "    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        return x * 2.0\n\n"
         "def get_inputs():\n    return [torch.randn(256, 1024)]\n\ndef get_init_inputs():\n    return []\n",
         "inputs": [{"name": "x", "shape": [256, 1024], "dtype": "F32"}], "outputs": [{"shape": [256, 1024], "dtype": "F32"}],
         "params": [], "init_inputs": []}
LINEAR = json.load(open(os.path.join(SKILL, "linear_relu_gemm", "task.json")))


def scale_plan(kernel, extra=""):
    return ("dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\n" + extra + "forward:\n  - launch: " + kernel +
            "\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [inputs.0, outputs.0, R * C]\n")


PLAN = scale_plan("probe")

cases = []


def case(name, kernels, plan=PLAN, task=SCALE, **keys):
    fields = ["%s=%s" % (k, v) for k, v in keys.items()]
    cases.append(("|".join(fields), name, {"task_id": task["task_id"], "candidate_id": "adv3-" + name, "task": task,
                                          "bundle": {"kernels": kernels, "plan": plan}}))


# One thread per element: v = x[i], u its bits; @BODY@ leaves the result in float r.
PROBE = r"""
@HEAD@
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const unsigned int u = __float_as_uint(v);
  float r;
@BODY@
  y[i] = r;
}
"""


def probe(body, head=""):
    return {"probe.cu": PROBE.replace("@HEAD@", head).replace("@BODY@", body)}


def fp(name, body, precision, head=""):
    case(name, probe(body, head), cpu="compiled", precision=precision)


# =================================================================================================
# Honest fp32: the control every precision case is read against.
fp("fp32-control", "  r = fmaf(v, 2.0f, 0.0f);", "fp32")
fp("fp32-constant-table", "  r = v * c_scale[i & 3];", "fp32", head="__constant__ float c_scale[4] = {2.0f, 2.0f, 2.0f, 2.0f};")
fp("fp64-math", "  r = (float)fma((double)v, 2.0, 0.0);", "fp32")

# --- Tensor cores in inline PTX: every MMA kind, spelled every way ptxas accepts ----------------
MMA4 = ('  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;\n'
        '  asm volatile("@OP@ {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"\n'
        '               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(u), "r"(u), "r"(u), "r"(u), "r"(u), "r"(u));\n'
        '  r = (d0 + d1) + (d2 + d3);')
IMMA4 = ('  int d0 = 0, d1 = 0, d2 = 0, d3 = 0;\n'
         '  asm volatile("@OP@ {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"\n'
         '               : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3) : "r"(u), "r"(u), "r"(u), "r"(u), "r"(u), "r"(u));\n'
         '  r = (float)(d0 + d1 + d2 + d3);')
F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
for name, op, prec, shape in [
        ("mma-f16", F16, "fp16", MMA4),
        ("mma-comment-block", "mma/* a comment */.sync/**/.aligned.m16n8k16.row.col.f32.f16.f16.f32", "fp16", MMA4),
        ("mma-comment-line", "mma // a comment\\n  .sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "fp16", MMA4),
        ("mma-tabs-crlf", "mma\\t.sync\\r\\n\\t.aligned .m16n8k16 .row .col\\n.f32 .f16 .f16 .f32", "fp16", MMA4),
        ("mma-bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "bf16", MMA4),
        ("mma-tf32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "tf32", MMA4),
        ("mma-e4m3", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "fp8", MMA4),
        ("mma-e5m2-newline", "mma.sync.aligned.m16n8k32.row.col.f32\\n.e5m2.e5m2.f32", "fp8", MMA4),
        ("mma-s8", "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", "int8", IMMA4),
        ("mma-u8-satfinite", "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.u8.u8.s32", "int8", IMMA4),
        ("mma-s4", "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32", "int8", IMMA4),
        ("mma-b1", "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc", "int8", IMMA4)]:
    fp(name, MMA4.replace("@OP@", op) if shape is MMA4 else IMMA4.replace("@OP@", op), prec)
# A space after a dot is not PTX: ptxas refuses it (no record, nothing runs).
case("mma-space-after-dot", probe(MMA4.replace("@OP@", "mma. sync. aligned. m16n8k16. row. col. f32. f16. f16. f32")),
     cpu="compile_error")
# wgmma needs sm_90a; NVRTC's -arch=sm_90 target refuses it, so no bundle can use it today (its
# opcode reads fp16/tf32/fp8/int8 all the same: ptx_scan_test).
case("wgmma-sm90", probe('  float d[4] = {0.f, 0.f, 0.f, 0.f};\n  unsigned long long desc = u;\n'
                         '  asm volatile("wgmma.fence.sync.aligned;\\n wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 '
                         '{%0, %1, %2, %3}, %4, %4, 1, 1, 1, 0, 0;" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(desc));\n'
                         '  r = d[0] + d[1] + d[2] + d[3];'), cpu="compile_error/compiled", precision="fp16")
# f16 accumulators: two registers of packed halves in and out.
fp("mma-f16-acc", '  unsigned int d0 = 0, d1 = 0;\n'
   '  asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3}, {%4}, {%0, %1};"\n'
   '               : "+r"(d0), "+r"(d1) : "r"(u), "r"(u), "r"(u));\n  r = __uint_as_float(d0 ^ d1);', "fp16")
# fp64 tensor cores: fp64 counts as fp32.
fp("mma-f64", '  double d0 = 0.0, d1 = 0.0;\n'
   '  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"\n'
   '               : "+d"(d0), "+d"(d1) : "d"((double)v), "d"((double)v));\n  r = (float)(d0 + d1);', "fp32")
# The opcode through a macro, its modifiers through another, joined by string concatenation.
fp("mma-macro", MMA4.replace('"@OP@ {', 'MMA_OP MMA_TYPES " {'), "fp16",
   head='#define MMA_OP "mma.sync.aligned.m16n8k16" "\\n"\n#define MMA_TYPES ".row.col" ".f32.f16" ".f16.f32"')
# Inside an asm scope with its own .reg declarations and a label.
fp("asm-scope-regs", '  unsigned int h;\n'
   '  asm volatile("{\\n\\t.reg .f16x2 t;\\n\\t.reg .pred p;\\n\\tmov.b32 t, %1;\\n\\tsetp.ne.u32 p, %1, 0;\\n"\n'
   '               "@p\\tfma.rn\\n.f16x2 t, t, t, t;\\n\\tmov.b32 %0, t;\\n}" : "=r"(h) : "r"(u));\n'
   '  r = __uint_as_float(h);', "fp16")
fp("asm-scope-cvt", '  asm volatile("{\\n .reg .f16 h;\\n cvt.rn.f16.f32 h, %1;\\n cvt.f32.f16 %0, h;\\n}" : "=f"(r) : "f"(v));', "fp16")
fp("asm-scope-label", '  unsigned int h = u;\n'
   '  asm volatile("{\\n$Lskip%=:\\n add.rn\\n /* */ .bf16x2 %0, %0, %0;\\n}" : "+r"(h));\n  r = __uint_as_float(h);', "bf16")

# --- wmma through <mma.h>: the operand type is in the fragment, not always in the opcode ---------
WMMA = r"""
#include <mma.h>
using namespace nvcuda;
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ @T@ a[@A@];
  __shared__ @T@ b[@A@];
  __shared__ @ACC@ c[256];
  const int base = blockIdx.x * 256;
  for (int i = threadIdx.x; i < @A@; i += blockDim.x) { a[i] = @CONV@; b[i] = a[i]; }
  __syncthreads();
  if (threadIdx.x < 32) {
    wmma::fragment<wmma::matrix_a, @SHAPE@, @FT@, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, @SHAPE@, @FT@, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, @SHAPE@, @ACC@> fc;
    wmma::fill_fragment(fc, 0);
    wmma::load_matrix_sync(fa, a, @LD@);
    wmma::load_matrix_sync(fb, b, @LD@);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
  }
  __syncthreads();
  if (base + (int)threadIdx.x < n) y[base + threadIdx.x] = (float)c[threadIdx.x];
}
"""


def wmma(name, t, ft, acc, shape, ld, conv, precision, head=""):
    src = head + WMMA
    for k, val in [("@T@", t), ("@FT@", ft), ("@ACC@", acc), ("@SHAPE@", shape), ("@LD@", ld), ("@CONV@", conv),
                   ("@A@", "256" if ld == "16" else "128")]:
        src = src.replace(k, val)
    case(name, {"probe.cu": src}, cpu="compiled", precision=precision)


wmma("wmma-half", "__half", "__half", "float", "16, 16, 16", "16", "__float2half(x[base + i])", "fp16", "#include <cuda_fp16.h>\n")
wmma("wmma-bf16", "__nv_bfloat16", "__nv_bfloat16", "float", "16, 16, 16", "16", "__float2bfloat16(x[base + i])", "bf16",
     "#include <cuda_bf16.h>\n")
wmma("wmma-tf32", "float", "wmma::precision::tf32", "float", "16, 16, 8", "8", "x[base + i]", "tf32")
# Integer wmma: the data made 8-bit by integer casts only, so the MMA alone says int8.
wmma("wmma-s8", "signed char", "signed char", "int", "16, 16, 16", "16", "(signed char)(int)x[base + i]", "int8")
wmma("wmma-u8", "unsigned char", "unsigned char", "int", "16, 16, 16", "16", "(unsigned char)(int)x[base + i]", "int8")

# --- Packed half2 / bf16x2 arithmetic through intrinsics, operands made with integer operations ---
H2 = "#include <cuda_fp16.h>\n__device__ __forceinline__ __half2 bits_h2(unsigned int b) { return *reinterpret_cast<__half2*>(&b); }\n" \
     "__device__ __forceinline__ unsigned int h2_bits(__half2 h) { return *reinterpret_cast<unsigned int*>(&h); }\n"
B2 = "#include <cuda_bf16.h>\n__device__ __forceinline__ __nv_bfloat162 bits_b2(unsigned int b) { return *reinterpret_cast<__nv_bfloat162*>(&b); }\n" \
     "__device__ __forceinline__ unsigned int b2_bits(__nv_bfloat162 h) { return *reinterpret_cast<unsigned int*>(&h); }\n"
fp("hadd2", "  r = __uint_as_float(h2_bits(__hadd2(bits_h2(u), bits_h2(u))));", "fp16", H2)
fp("hfma2", "  r = __uint_as_float(h2_bits(__hfma2(bits_h2(u), bits_h2(u), bits_h2(u >> 1))));", "fp16", H2)
fp("hmax2", "  r = __uint_as_float(h2_bits(__hmax2(bits_h2(u), bits_h2(u >> 3))));", "fp16", H2)
fp("hlt2-compare", "  r = __uint_as_float(h2_bits(__hlt2(bits_h2(u), bits_h2(u >> 3))));", "fp16", H2)
fp("h2exp2", "  r = __uint_as_float(h2_bits(h2exp2(bits_h2(u))));", "fp16", H2)
fp("half2-operators", "  __half2 h = bits_h2(u);\n  h = h * h + h;\n  r = __uint_as_float(h2_bits(h));", "fp16", H2)
fp("bfloat162-hmul2", "  r = __uint_as_float(b2_bits(__hmul2(bits_b2(u), bits_b2(u))));", "bf16", B2)
fp("bfloat162-hfma2", "  r = __uint_as_float(b2_bits(__hfma2(bits_b2(u), bits_b2(u), bits_b2(u))));", "bf16", B2)
fp("atomic-half2", "  __half2* p = reinterpret_cast<__half2*>(y) + (i >> 1);\n  atomicAdd(p, bits_h2(u));\n  r = v;", "fp16", H2)
fp("red-bf16x2-asm", '  asm volatile("red.global.add.noftz\\n.bf16x2 [%0], %1;" :: "l"(y + (i & ~1)), "r"(u) : "memory");\n  r = v;', "bf16")
fp("half2-asm", '  unsigned int h;\n  asm("add.rn.f16x2 %0, %1, %1;" : "=r"(h) : "r"(u));\n  r = __uint_as_float(h);', "fp16")
fp("half-scalar-hfma", "  __half h = __ushort_as_half((unsigned short)u);\n  r = __half2float(__hfma(h, h, h));", "fp16",
   "#include <cuda_fp16.h>\n")

# --- Conversions to 16- and 8-bit types: storage rounded, arithmetic in fp32 ---------------------
fp("float2half-rn-roundtrip", "  r = __half2float(__float2half_rn(v)) * 2.0f;", "fp16", "#include <cuda_fp16.h>\n")
fp("half-constructor", "  const __half h = v;\n  r = (float)h * 2.0f;", "fp16", "#include <cuda_fp16.h>\n")
fp("float2bfloat16-roundtrip", "  r = __bfloat162float(__float2bfloat16_rn(v)) * 2.0f;", "bf16", "#include <cuda_bf16.h>\n")
fp("floats2half2-pack", "  r = __low2float(__floats2half2_rn(v, v)) * 2.0f;", "fp16", "#include <cuda_fp16.h>\n")
fp("floats2bfloat162-pack", "  r = __low2float(__floats2bfloat162_rn(v, v)) * 2.0f;", "bf16", "#include <cuda_bf16.h>\n")
fp("fp8-e4m3-type", "  const __nv_fp8_e4m3 q(v);\n  r = (float)q * 2.0f;", "fp8", "#include <cuda_fp8.h>\n")
fp("fp8-e5m2x2-type", "  const __nv_fp8x2_e5m2 q(make_float2(v, v));\n  r = ((float2)q).x * 2.0f;", "fp8", "#include <cuda_fp8.h>\n")
fp("fp8-cvt-intrinsic", "  const __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(make_float2(v, v), __NV_SATFINITE, __NV_E4M3);\n"
   "  r = __half2float(__ushort_as_half(__nv_cvt_fp8x2_to_halfraw2(q, __NV_E4M3).x)) * 2.0f;", "fp8", "#include <cuda_fp8.h>\n")
fp("cvt-e4m3x2-asm-newline", '  unsigned short q;\n'
   '  asm("cvt.rn.satfinite\\n.e4m3x2.f32 %0, %1, %1;" : "=h"(q) : "f"(v));\n  r = (float)q;', "fp8")
fp("cvt-e5m2x2-from-f16x2", '  unsigned short q;\n  asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(q) : "r"(u));\n  r = (float)q;',
   "fp8")
fp("cvt-f16x2-pack-asm", '  unsigned int h;\n  asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(h) : "f"(v));\n  r = __uint_as_float(h);', "fp16")
fp("cvt-bf16x2-pack-asm", '  unsigned int h;\n  asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(h) : "f"(v));\n  r = __uint_as_float(h);',
   "bf16")
fp("cvt-tf32-asm", '  unsigned int t;\n  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(t) : "f"(v));\n  r = __uint_as_float(t) * 2.0f;', "tf32")
fp("cvt-s8-asm", '  int q;\n  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(q) : "f"(v * 16.0f));\n  r = q / 8.0f;', "int8")
fp("cvt-u8-asm", '  unsigned int q;\n  asm("cvt.rni.sat.u8.f32 %0, %1;" : "=r"(q) : "f"(v * 16.0f));\n  r = q / 8.0f;', "int8")

# --- dp4a / dp2a / byte SIMD ----------------------------------------------------------------------
fp("dp4a", "  r = (float)__dp4a((int)u, (int)u, 0);", "int8")
fp("dp4a-unsigned", "  r = (float)__dp4a(u, u, 0u);", "int8")
fp("dp2a-lo", "  r = (float)__dp2a_lo((int)u, (int)u, 0);", "int8")
fp("dp4a-asm-comment", '  int d;\n  asm("dp4a/**/.s32.s32 %0, %1, %1, 0;" : "=r"(d) : "r"(u));\n  r = (float)d;', "int8")

# --- Where the instruction is: templates, device functions, pointers, kernels never launched ------
TEMPLATED = r"""
#include <cuda_fp16.h>
template <typename T> __device__ __forceinline__ float through(float v) { return (float)(T)v; }
template <typename T> __global__ void probe_t(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = through<T>(x[i]) * 2.0f;
}
template __global__ void probe_t<float>(const float*, float*, int);
template __global__ void probe_t<__half>(const float*, float*, int);
"""
case("template-half", {"probe.cu": TEMPLATED}, scale_plan("probe_t<__half>"), cpu="compiled", precision="fp16")
case("template-float", {"probe.cu": TEMPLATED}, scale_plan("probe_t<float>"), cpu="compiled", precision="fp32")
NOINLINE = r"""
#include <cuda_fp16.h>
__device__ __noinline__ float round_half(float v) { return __half2float(__float2half_rn(v)); }
__device__ __noinline__ float twice(float v) { return 2.0f * round_half(v); }
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = twice(x[i]);
}
"""
case("device-function-noinline", {"probe.cu": NOINLINE}, cpu="compiled", precision="fp16")
# The fp16 function reached only through a function pointer in a __device__ variable.
FNPTR = r"""
#include <cuda_fp16.h>
__device__ float round_half(float v) { return __half2float(__float2half_rn(v)); }
__device__ float exact(float v) { return v; }
typedef float (*unary)(float);
__device__ unary g_ops[2] = {exact, round_half};
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * g_ops[(i >> 30) + 1](x[i]);
}
"""
case("function-pointer-table", {"probe.cu": FNPTR}, cpu="compiled", precision="fp16")
# ... in a __constant__ table, the index from the data (the compiler cannot fold the call).
case("function-pointer-constant", {"probe.cu": FNPTR.replace("__device__ unary g_ops", "__constant__ unary g_ops")
                                   .replace("g_ops[(i >> 30) + 1]", "g_ops[__float_as_uint(x[i]) >> 31]")},
     cpu="compiled", precision="fp16")
# ... the address written at run time by the init step, then called through a register.
FNPTR_INIT = r"""
#include <cuda_fp16.h>
__device__ float round_half(float v) { return __half2float(__float2half_rn(v)); }
typedef float (*unary)(float);
__global__ void pick(unsigned long long* slot) { *slot = (unsigned long long)(unary)round_half; }
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n, const unsigned long long* slot) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * ((unary)*slot)(x[i]);
}
"""
case("function-pointer-runtime", {"probe.cu": FNPTR_INIT},
     "dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nscratch:\n  slot: {dtype: int64, shape: [1]}\n"
     "init:\n  - launch: pick\n    grid: [1]\n    block: [1]\n    args: [scratch.slot]\n"
     "forward:\n  - launch: probe\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [inputs.0, outputs.0, R * C, scratch.slot]\n",
     cpu="compiled", precision="fp16")
# A virtual call: the derived class rounds to fp16.
VIRTUAL = r"""
#include <cuda_fp16.h>
struct Op { __device__ virtual float apply(float v) const { return v; } };
struct HalfOp : Op { __device__ float apply(float v) const override { return __half2float(__float2half_rn(v)); } };
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Op plain;
  HalfOp half;
  const Op* op = (__float_as_uint(x[i]) & 1u) ? static_cast<const Op*>(&half) : &plain;
  y[i] = 2.0f * op->apply(x[i]);
}
"""
case("virtual-call", {"probe.cu": VIRTUAL}, cpu="compiled", precision="fp16")
fp("lambda", "  auto round_half = [](float a) { return __half2float(__float2half_rn(a)); };\n  r = 2.0f * round_half(v);", "fp16",
   "#include <cuda_fp16.h>\n")
# A kernel the plan never launches holds tensor cores and fp8: the record stays fp32.
UNLAUNCHED = PROBE.replace("@HEAD@", "#include <cuda_fp8.h>").replace("@BODY@", "  r = v * 2.0f;") + r"""
extern "C" __global__ void never_launched(const float* x, float* y) {
  const unsigned int u = __float_as_uint(x[threadIdx.x]);
""" + MMA4.replace("@OP@", F16).replace("  r = ", "  y[threadIdx.x] = ") + """
  y[threadIdx.x + 32] = (float)__nv_fp8_e4m3(x[threadIdx.x]);
}
"""
case("unlaunched-kernel-mma-fp8", {"probe.cu": UNLAUNCHED}, cpu="compiled", precision="fp32")
# ... and two launched kernels, the second fp16: the record is fp16.
case("second-launch-half", {"probe.cu": UNLAUNCHED.replace("@HEAD@", "") + r"""
#include <cuda_fp16.h>
__global__ void halve_round(float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __half2float(__float2half_rn(y[i]));
}
"""}, PLAN + "  - launch: halve_round\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [outputs.0, R * C]\n",
     cpu="compiled", precision="fp16")

# Rounding in init: the weights stored fp16-rounded (as fp32) by the init step, the forward's own
# arithmetic fp32. The init kernel is launched: it counts.
INIT_ROUND = r"""
#include <cuda_fp16.h>
__global__ void round_weights(const float* __restrict__ w, float* __restrict__ wr, int total) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < total) wr[i] = __half2float(__float2half_rn(w[i]));
}
__global__ void linear_relu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                            float* __restrict__ y, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc = fmaf(x[(size_t)m * K + k], w[(size_t)n * K + k], acc);
  y[(size_t)m * N + n] = fmaxf(acc + b[n], 0.0f);
}
"""
case("init-rounds-weights-half", {"linear.cu": INIT_ROUND},
     "dims:\n  M: inputs.0.shape[0]\n  K: inputs.0.shape[1]\n  N: params.linear.weight.shape[0]\n"
     "scratch:\n  wr: {dtype: float32, shape: [N, K]}\n"
     "init:\n  - launch: round_weights\n    grid: [cdiv(N * K, 256)]\n    block: [256]\n    args: [params.linear.weight, scratch.wr, N * K]\n"
     "forward:\n  - launch: linear_relu\n    grid: [cdiv(N, 128), M]\n    block: [128]\n"
     "    args: [inputs.0, scratch.wr, params.linear.bias, outputs.0, M, N, K]\n",
     task=LINEAR, cpu="compiled", precision="fp16")
# A computed call: a function's address plus an offset can land in a kernel never launched, so a
# kernel that calls through a register counts the whole module (the unlaunched fp16 kernel too).
JUMP = r"""
#include <cuda_fp16.h>
__device__ float exact(float v) { return v; }
typedef float (*unary)(float);
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n, const long long* offset) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * ((unary)((const char*)(unary)exact + *offset))(x[i]);
}
extern "C" __global__ void never_launched(float* y) { y[threadIdx.x] = __half2float(__hmul(__float2half(y[threadIdx.x]), __float2half(3.0f))); }
"""
case("computed-call-into-unlaunched", {"probe.cu": JUMP},
     "dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nscratch:\n  offset: {dtype: int64, shape: [1]}\n"
     "forward:\n  - launch: probe\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [inputs.0, outputs.0, R * C, scratch.offset]\n",
     cpu="compiled", precision="fp16")

# Inside a repeat (one iteration, or none): the step is in the plan's steps, it counts.
for name, count in [("repeat-launch-half", "1"), ("repeat-zero-launch-half", "0")]:
    case(name, {"probe.cu": UNLAUNCHED.replace("@HEAD@", "") + r"""
#include <cuda_fp16.h>
__global__ void halve_round(float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __half2float(__float2half_rn(y[i]));
}
"""}, PLAN + "  - repeat: " + count + "\n    steps:\n      - launch: halve_round\n        grid: [cdiv(R * C, 256)]\n"
         "        block: [256]\n        args: [outputs.0, R * C]\n", cpu="compiled", precision="fp16")
# A cooperative launch of the fp16 kernel: the same.
case("cooperative-launch-half", {"probe.cu": PROBE.replace("@HEAD@", "#include <cuda_fp16.h>").replace(
    "@BODY@", "  r = __half2float(__float2half_rn(v)) * 2.0f;")},
     PLAN.replace("    grid: [cdiv(R * C, 256)]", "    cooperative: true\n    grid: [cdiv(R * C, 256)]"),
     cpu="compiled", precision="fp16")

# --- Library steps: their declared precision counts -----------------------------------------------
GEMM_PLAN = open(os.path.join(SKILL, "linear_relu_gemm", "plan.yaml")).read()
case("gemm-fp32", {}, GEMM_PLAN, task=LINEAR, cpu="compiled", precision="fp32")
case("gemm-tf32-declared", {}, GEMM_PLAN.replace("      out: outputs.0", "      out: outputs.0\n      compute: tf32"), task=LINEAR,
     cpu="compiled", precision="tf32")

# A gemm on bfloat16 buffers whose conversions are integer shifts: the buffers' dtype is the
# library step's declared precision.
BF16_BITS = r"""
#include <cuda_bf16.h>
// fp32 -> bf16 by truncation, bf16 -> fp32 by a shift: integer operations only.
__global__ void to_bf16(const float* __restrict__ x, __nv_bfloat16* __restrict__ out, int total) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < total) reinterpret_cast<unsigned short*>(out)[i] = (unsigned short)(__float_as_uint(x[i]) >> 16);
}
__global__ void bias_relu_from_bf16(const __nv_bfloat16* __restrict__ y, const float* __restrict__ b, float* __restrict__ out,
                                    int M, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  const unsigned int bits = (unsigned int)reinterpret_cast<const unsigned short*>(y)[i] << 16;
  out[i] = fmaxf(__uint_as_float(bits) + b[i % N], 0.0f);
}
"""
case("gemm-bf16-buffers-shift-conversions", {"bf16.cu": BF16_BITS},
     "dims:\n  M: inputs.0.shape[0]\n  K: inputs.0.shape[1]\n  N: params.linear.weight.shape[0]\n"
     "scratch:\n  xb: {dtype: bfloat16, shape: [M, K]}\n  wb: {dtype: bfloat16, shape: [N, K]}\n  yb: {dtype: bfloat16, shape: [M, N]}\n"
     "init:\n  - launch: to_bf16\n    grid: [cdiv(N * K, 256)]\n    block: [256]\n    args: [params.linear.weight, scratch.wb, N * K]\n"
     "forward:\n  - launch: to_bf16\n    grid: [cdiv(M * K, 256)]\n    block: [256]\n    args: [inputs.0, scratch.xb, M * K]\n"
     "  - gemm:\n      a: scratch.xb\n      b: scratch.wb\n      trans_b: true\n      out: scratch.yb\n"
     "  - launch: bias_relu_from_bf16\n    grid: [cdiv(M * N, 256)]\n    block: [256]\n"
     "    args: [scratch.yb, params.linear.bias, outputs.0, M, N]\n",
     task=LINEAR, cpu="compiled", precision="bf16")
# Activations stored in a float16 scratch buffer, written and read with integer operations only.
F16_STORE = r"""
#include <cuda_fp16.h>
__global__ void store_half_bits(const float* __restrict__ x, __half* __restrict__ h, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) reinterpret_cast<unsigned short*>(h)[i] = (unsigned short)(__float_as_uint(x[i]) >> 16);
}
__global__ void probe(const __half* __restrict__ h, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * __uint_as_float((unsigned int)reinterpret_cast<const unsigned short*>(h)[i] << 16);
}
"""
case("scratch-float16-integer-stores", {"probe.cu": F16_STORE},
     "dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nscratch:\n  h: {dtype: float16, shape: [R, C]}\nforward:\n"
     "  - launch: store_half_bits\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [inputs.0, scratch.h, R * C]\n"
     "  - launch: probe\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [scratch.h, outputs.0, R * C]\n",
     cpu="compiled", precision="fp16")
# Integer scratch (a mask) says nothing about precision: fp32.
MASK = r"""
__global__ void mark(const float* __restrict__ x, unsigned char* __restrict__ m, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) m[i] = x[i] > 0.0f;
}
__global__ void probe(const float* __restrict__ x, const unsigned char* __restrict__ m, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = m[i] ? 2.0f * x[i] : x[i] + x[i];
}
"""
case("scratch-uint8-mask-control", {"probe.cu": MASK},
     "dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nscratch:\n  m: {dtype: uint8, shape: [R, C]}\nforward:\n"
     "  - launch: mark\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [inputs.0, scratch.m, R * C]\n"
     "  - launch: probe\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [inputs.0, scratch.m, outputs.0, R * C]\n",
     cpu="compiled", precision="fp32")

# =================================================================================================
# The device heap, whatever the spelling: refused from what the compiled code calls.
HEAP = r"""
@HEAD@
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float r = x[i] * 2.0f;
  if (i == 0) {
@BODY@
  }
  y[i] = r;
}
"""


def heap(name, body, head="", rule="device_malloc", cpu="policy_violation"):
    """A heap spelling. cpu=compile_error where the compiler itself refuses it (a function only the
    driver could resolve that it does not know: nothing compiles, nothing runs)."""
    case(name, {"probe.cu": HEAP.replace("@HEAD@", head).replace("@BODY@", body)}, cpu=cpu, **({"rule": rule} if rule else {}))


heap("heap-token-paste", "    float* p = (float*)PASTE(mal, loc)(64);\n    p[0] = r;\n    PASTE(fr, ee)(p);", "#define PASTE(a, b) a##b")
heap("heap-parenthesized", "    float* p = (float*)(malloc)(64);\n    p[0] = r;\n    (free)(p);")
heap("heap-global-scope", "    float* p = (float*)::malloc(64);\n    p[0] = r;")
heap("heap-operator-new-64", "    void* p = ::operator new(64);\n    ((float*)p)[0] = r;")
heap("heap-new-array", "    int* p = new int[4];\n    p[0] = (int)r;")
heap("heap-new-array-macro", "    int* p = NEW_ int[4];\n    p[0] = (int)r;\n    DELETE_[] p;", "#define NEW_ n##ew\n#define DELETE_ de##lete")
heap("heap-operator-delete", "    ::operator delete((void*)x);")
heap("heap-nothrow-new", "    int* p = OP_NEW(4, nothrow_tag{});\n    p[0] = (int)r;",
     "struct nothrow_tag {};\n__device__ void* operator new[](size_t n, nothrow_tag) noexcept;\n#define OP_NEW(n, t) (int*)operator new[](n * sizeof(int), t)",
     rule=None, cpu="compile_error")
heap("heap-free-parenthesized", "    (free)((void*)x);")
heap("heap-builtin-malloc", "    float* p = (float*)__builtin_malloc(64);\n    p[0] = r;", rule=None, cpu="compile_error")
# ptxas takes no address of malloc: a pointer the compiler cannot fold is refused by ptxas, one it
# folds is a direct call.
heap("heap-function-pointer", "    void* (*volatile alloc)(size_t) = malloc;\n    float* p = (float*)alloc(64);\n    p[0] = r;",
     rule=None, cpu="compile_error")
heap("heap-function-pointer-macro", "    void* (*alloc)(size_t) = &MAL;\n    float* p = (float*)alloc(64);\n    p[0] = r;",
     "#define MAL mal##loc")
heap("heap-aligned-device-malloc", "    float* p = (float*)__nv_aligned_device_malloc(64, 16);\n    p[0] = r;")
# The driver's own entry behind it, declared and called directly.
heap("heap-syscall-direct", "    float* p = (float*)__cuda_syscall_aligned_malloc(64, 16);\n    p[0] = r;",
     'extern "C" __device__ void* __cuda_syscall_aligned_malloc(size_t, size_t);')
heap("heap-memalign", "    float* p = (float*)memalign(16, 64);\n    p[0] = r;",
     'extern "C" __device__ void* memalign(size_t, size_t);', rule=None, cpu="compile_error")
heap("heap-calloc", "    float* p = (float*)calloc(4, 16);\n    p[0] = r;", 'extern "C" __device__ void* calloc(size_t, size_t);',
     rule=None, cpu="compile_error")
heap("heap-realloc", "    float* p = (float*)realloc(nullptr, 64);\n    p[0] = r;", 'extern "C" __device__ void* realloc(void*, size_t);',
     rule=None, cpu="compile_error")
# NVRTC ignores an asm label on a device function: the call stays to grab, which nothing defines.
heap("heap-asm-label", "    float* p = (float*)grab(64);\n    p[0] = r;", 'extern "C" __device__ void* grab(size_t) asm("malloc");',
     rule=None, cpu="compile_error")
# By hand in inline PTX: malloc declared in the asm's own scope and called, split over lines as
# NVRTC writes it; no malloc anywhere in the C++.
heap("heap-asm-call", '    unsigned long long p;\n'
     '    asm volatile("{\\n .extern .func (.param .b64 r) malloc (.param .b64 q);\\n .param .b64 a;\\n .param .b64 ret;\\n'
     ' st.param.b64 [a], 64;\\n call.uni\\n (ret),\\n malloc,\\n (a);\\n ld.param.b64 %0, [ret];\\n}" : "=l"(p));\n'
     '    *(float*)p = r;')
# ... the name spelled through an asm operand string pasted by the preprocessor.
heap("heap-asm-call-pasted", '    unsigned long long p;\n'
     '    asm volatile("{\\n .extern .func (.param .b64 r) " NAME " (.param .b64 q);\\n .param .b64 a;\\n .param .b64 ret;\\n'
     ' st.param.b64 [a], 64;\\n call.uni (ret), " NAME ", (a);\\n ld.param.b64 %0, [ret];\\n}" : "=l"(p));\n'
     '    *(float*)p = r;', '#define STR2(x) #x\n#define STR(x) STR2(x)\n#define NAME STR(mal##loc)')
heap("heap-cudamalloc-device-runtime", "    float* p;\n    cudaMalloc((void**)&p, 64);\n    p[0] = r;", "#include <cuda_runtime.h>",
     rule=None, cpu="policy_violation/compile_error")
# ... parenthesized, past the source pattern: what the compiled code calls decides.
heap("heap-cudamalloc-parenthesized", "    float* p;\n    (cudaMalloc)((void**)&p, 64);\n    p[0] = r;", "#include <cuda_runtime.h>",
     rule=None, cpu="policy_violation/compile_error")
heap("heap-new-in-template", "    float* p = make<float>();\n    *p = r;", "#define NEW_ new\ntemplate <class T> __device__ T* make() { return NEW_ T(); }",
     rule="device_malloc")
# A printf channel by hand: vprintf declared and called without the word printf in the source.
heap("vprintf-declared", '    VPF("%f\\n", (const char*)&r);', 'extern "C" __device__ int vprintf(const char*, const char*);\n#define VPF v##printf',
     rule="printf")
# Placement new on a scratch buffer allocates nothing: legal.
PLACEMENT = r"""
__device__ __forceinline__ void* operator new(size_t, float* where) noexcept { return where; }
struct Pair { float a, b; __device__ Pair(float v) : a(v), b(2.0f * v) {} };
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float slot[2];
  Pair* p = ::new (slot) Pair(x[i]);
  y[i] = p->b;
}
"""
case("placement-new-control", {"probe.cu": PLACEMENT}, cpu="compiled", precision="fp32")
# A deleted copy constructor is C++, not the heap: legal.
NONCOPY = r"""
struct Acc {
  float s = 0.0f;
  __device__ Acc() = default;
  Acc(const Acc&) = delete;
  Acc& operator=(const Acc&) = delete;
  __device__ void add(float v) { s += v; }
};
__global__ void probe(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Acc a;
  a.add(x[i]);
  a.add(x[i]);
  y[i] = a.s;
}
"""
case("deleted-copy-control", {"probe.cu": NONCOPY}, cpu="compiled", precision="fp32")

# =================================================================================================
# The checker's namespace: a bundle kernel named ca_... is refused, however the name is spelled.
RESERVED = PROBE.replace("@HEAD@", "").replace("@BODY@", "  r = v * 2.0f;")
for name, src, kernel in [
        ("reserved-plain", RESERVED.replace("void probe(", "void ca_probe("), "ca_probe"),
        ("reserved-extern-c", RESERVED.replace("__global__ void probe(", 'extern "C" __global__ void ca_fingerprint('), "ca_fingerprint"),
        ("reserved-namespace", "namespace work {\n" + RESERVED.replace("void probe(", "void ca_probe(") + "}\n", "work::ca_probe"),
        ("reserved-nested-template", "namespace a { namespace b {\ntemplate <int K>\n" + RESERVED.replace("void probe(", "void ca_probe(") +
         "template __global__ void ca_probe<2>(const float*, float*, int);\n} }\n", "a::b::ca_probe<2>"),
        ("reserved-macro", "#define NAMED(s) ca_##s\n" + RESERVED.replace("void probe(", "void NAMED(scrub_shared)("), "ca_scrub_shared"),
        ("reserved-namespace-std", "namespace std {\n" + RESERVED.replace("void probe(", "void ca_probe(") + "}\n", "std::ca_probe"),
        ("reserved-anonymous-namespace", "namespace {\n" + RESERVED.replace("void probe(", "void ca_probe(") + "}\n", "ca_probe"),
]:
    case(name, {"probe.cu": src}, scale_plan(kernel), cpu="policy_violation", rule="reserved_name")
# An asm label on a kernel's declaration: NVRTC ignores it, the entry is probe (what the PTX, the
# cubin and CUPTI name): not in the namespace.
case("reserved-asm-label-ignored", {"probe.cu": RESERVED.replace("int n) {", 'int n) asm("ca_compare");\n__global__ void probe(const float* '
                                                                 '__restrict__ x, float* __restrict__ y, int n) {')},
     cpu="compiled", precision="fp32")
# Unlaunched, it is refused all the same (the module is loaded whole).
case("reserved-unlaunched", {"probe.cu": RESERVED + 'extern "C" __global__ void ca_flush(float* y) { y[0] = 0.0f; }\n'},
     cpu="policy_violation", rule="reserved_name")

# =================================================================================================
# Local memory (session 18, helper R6). The driver holds a launch's per-thread local memory for every
# thread the GPU can run at once (2048 per SM) and keeps it: a kernel with a 512 KiB frame asks for
# 141 GB. Launched in init, it failed the runner's load with out of memory, which was node_error (no
# verdict, no -1): a wrong kernel dodged its -1. Launched in the warm call, it left the reference
# worker no memory for the next trial (reference_error, no verdict either). Refused at compile time
# from the cubin's frame sizes (max_stack_bytes), however the source hides the frame: ptxas's log gave
# a kernel the frame of the callee it lists last (0), and a message the bundle prints adds lines.
STACK_PLAN = ("dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nscratch:\n  s: {dtype: float32, shape: [32]}\n"
              "init:\n  - launch: hog\n    grid: [1]\n    block: [32]\n    args: [scratch.s, 3]\n" + PLAN[PLAN.index("forward:"):])
WRONG = PROBE.replace("@HEAD@", "").replace("@BODY@", "  r = v * 3.0f;")  # wrong on purpose: the dodge needs no right answer


def stack(name, hog, cpu="policy_violation", rule="max_stack_bytes", plan=STACK_PLAN, **keys):
    case(name, {"probe.cu": WRONG + hog}, plan, cpu=cpu, **({"rule": rule} if rule else {}), **keys)


LOCAL = r"""
__global__ void hog(float* s, int k) {
  volatile float buf[@N@];
  for (int j = 0; j < @N@; j += 1024) buf[j] = j + k;
  s[threadIdx.x] = buf[(k * 977) % @N@];
}
"""
stack("stack-init-512k", LOCAL.replace("@N@", "131072"))
stack("stack-init-16k", LOCAL.replace("@N@", "4096"))
stack("stack-just-over", LOCAL.replace("@N@", "2049"))
# The frame in a callee: ptxas's log lists the callee after the kernel, with 0 bytes of its own.
stack("stack-noinline-callee", r"""
__device__ __noinline__ float deep(int k) {
  volatile float buf[131072];
  for (int j = 0; j < 131072; j += 1024) buf[j] = j + k;
  return buf[(k * 977) % 131072];
}
__global__ void hog(float* s, int k) { s[threadIdx.x] = deep(k); }
""")
# Through a function pointer.
stack("stack-function-pointer", r"""
typedef float (*fn)(int);
__device__ __noinline__ float big(int k) { volatile float buf[65536]; buf[k & 65535] = k; return buf[(k * 7) & 65535]; }
__device__ __noinline__ float small(int k) { return k; }
__global__ void hog(float* s, int k) { fn f = (k & 1) ? big : small; s[threadIdx.x] = f(k); }
""")
# Recursion: the cubin states no frame (the stack is the context's, sized at run time); ptxas's log does.
stack("stack-recursive", r"""
__device__ float rec(int d, int k) {
  volatile float buf[4096];
  buf[k & 4095] = d;
  return d == 0 ? buf[(k * 7) & 4095] : rec(d - 1, k) + buf[(k * 3) & 4095];
}
__global__ void hog(float* s, int k) { s[threadIdx.x] = rec(k, k); }
""")
# A kernel the plan never launches: the module is loaded whole, the rule reads every function.
stack("stack-unlaunched", LOCAL.replace("@N@", "131072").replace("void hog(", "void never_launched("), plan=PLAN)
# Fake ptxas lines printed by the bundle's own compile messages: the cubin decides.
stack("stack-fake-log-lines", '#pragma message("\\nptxas info    : Compiling entry function \'_Z3hogPfi\' for \'sm_90\'\\n'
      'ptxas info    : Function properties for _Z3hogPfi\\nptxas         .     0 bytes stack frame, 0 bytes spill stores, '
      '0 bytes spill loads\\n")\n' + LOCAL.replace("@N@", "131072"))
# Controls: a 4 KiB per-thread array and the largest frame the rules allow compile.
case("stack-4k-control", {"probe.cu": PROBE.replace("@HEAD@", "").replace("@BODY@", "  r = v * 2.0f;") + LOCAL.replace("@N@", "1024")},
     STACK_PLAN, cpu="compiled", precision="fp32")
case("stack-8k-control", {"probe.cu": PROBE.replace("@HEAD@", "").replace("@BODY@", "  r = v * 2.0f;") + LOCAL.replace("@N@", "2048")},
     STACK_PLAN, cpu="compiled", precision="fp32")

# The header allowlist was read from how an #include is spelled: a header named through a macro, a
# directive split by a backslash-newline or written with the %: digraph got past it (NVRTC reads them
# all). An include must name its header literally, read after the compiler's line splicing.
OK_BODY = PROBE.replace("@BODY@", "  r = v * 2.0f;")
for name, head in [("include-through-macro", "#define H <cuda/std/chrono>\n#include H"),
                   ("include-spliced", "#include \\\n<cuda/std/chrono>"),
                   ("include-directive-spliced", "#\\\ninclude <cuda/std/chrono>"),
                   ("include-digraph", "%:include <cuda/std/chrono>"),
                   ("include-next-macro", "#define H <cuda/std/chrono>\n#include_next H")]:
    case(name, {"probe.cu": OK_BODY.replace("@HEAD@", head)}, cpu="policy_violation/compile_error", rule="allowed_headers")
# Controls: an allowed header named literally, also through the digraph and with spaces.
case("include-literal-control", {"probe.cu": OK_BODY.replace("@HEAD@", "#include <cuda/std/limits>\n%:  include <cfloat>")},
     cpu="compiled", precision="fp32")
# A forbidden call split by a backslash-newline: the source rule reads the spliced line.
case("clock-spliced", {"probe.cu": PROBE.replace("@HEAD@", "").replace("@BODY@", "  long long t = clo\\\nck64();\n  r = v * 2.0f + (t & 0);")},
     cpu="policy_violation", rule="clock")

names = [c[1] for c in cases]
assert len(set(names)) == len(names), "duplicate case names"
for expected, name, rec in cases:
    print("%s|%s|0" % (expected, name))
    print(json.dumps(rec))
