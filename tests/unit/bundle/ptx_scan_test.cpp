// Units for the PTX reading (libcommon/bundle/ptx_scan): precision from what ptxas executes, per
// launched kernel with what it calls; whatever the spelling (line breaks between an opcode and its
// modifiers, comments, wmma, intrinsics, inline asm). The compiled cases run NVRTC for real.
#include <doctest/doctest.h>

#include <chrono>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/ptx_scan.hpp"
#include "libcommon/cuda/nvrtc.hpp"

using namespace ca::bundle;

TEST_CASE("ptx scan: each instruction's class from its opcode and modifiers") {
  CHECK(instruction_precision("fma.rn.f32") == "fp32");
  CHECK(instruction_precision("fma.rn.f64") == "fp32");
  CHECK(instruction_precision("fma.rn.f16") == "fp16");
  CHECK(instruction_precision("fma.rn.f16x2") == "fp16");
  CHECK(instruction_precision("add.rn.bf16x2") == "bf16");
  CHECK(instruction_precision("ex2.approx.ftz.f16x2") == "fp16");
  CHECK(instruction_precision("cvt.rn.f16.f32") == "fp16");
  CHECK(instruction_precision("cvt.f32.bf16") == "bf16");
  CHECK(instruction_precision("cvt.rna.tf32.f32") == "tf32");
  CHECK(instruction_precision("cvt.rn.satfinite.e4m3x2.f32") == "fp8");
  CHECK(instruction_precision("cvt.rn.satfinite.e2m1x2.f32") == "fp8");
  CHECK(instruction_precision("cvt.rni.sat.s8.f32") == "int8");
  CHECK(instruction_precision("cvt.pack.sat.s8.s32.b32") == "int8");
  CHECK(instruction_precision("cvt.s32.s8") == "fp32");  // a char widened is integer work
  CHECK(instruction_precision("dp4a.s32.s32") == "int8");
  CHECK(instruction_precision("dp2a.lo.u32.u32") == "int8");
  CHECK(instruction_precision("vabsdiff4.u32.u32.u32.add") == "int8");
  CHECK(instruction_precision("red.global.add.noftz.f16x2") == "fp16");
  CHECK(instruction_precision("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == "fp16");
  CHECK(instruction_precision("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == "bf16");
  CHECK(instruction_precision("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == "tf32");
  CHECK(instruction_precision("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32") == "fp8");
  CHECK(instruction_precision("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32") == "int8");
  CHECK(instruction_precision("mma.sync.aligned.m8n8k32.row.col.s32.s4.s4.s32") == "int8");
  CHECK(instruction_precision("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc") == "int8");
  CHECK(instruction_precision("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64") == "fp32");
  // wmma.mma names only D and C: f16 operands are not spelled.
  CHECK(instruction_precision("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32") == "fp16");
  CHECK(instruction_precision("wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32") == "tf32");
  CHECK(instruction_precision("wmma.load.a.sync.aligned.row.m16n16k16.global.s8") == "int8");
  CHECK(instruction_precision("wmma.store.d.sync.aligned.row.m16n16k16.global.f32") == "fp32");
  CHECK(instruction_precision("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == "bf16");
  CHECK(instruction_precision("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8") == "int8");
  CHECK(instruction_precision("tcgen05.mma.cta_group::1.kind::f16") == "fp16");
  CHECK(instruction_precision("tcgen05.mma.cta_group::1.kind::i8") == "int8");
  CHECK(instruction_precision("ld.global.b16") == "fp32");  // storage alone: the tolerance judges it
  CHECK(lower_precision("tf32", "bf16") == "bf16");
  CHECK(lower_precision("fp32", "int8") == "int8");
}

TEST_CASE("ptx scan: an instruction normalized so its spelling cannot matter") {
  CHECK(normalize_instruction("\n\t@%p1 mma\n  .sync\n\t.aligned .m16n8k16 {%f1, %f2}") == "mma.sync.aligned.m16n8k16 {%f1, %f2}");
  CHECK(normalize_instruction("$L__BB0_2:\n\t{ call.uni (retval0), \n\tmalloc, \n\t(param0)") == "call.uni (retval0), malloc, (param0)");
  CHECK(normalize_instruction("  @!%p2 bra.uni \t $L__BB0_3") == "bra.uni $L__BB0_3");
  CHECK(normalize_instruction("fma\x0b.rn\x0c.f16 %rs1") == "fma.rn.f16 %rs1");
  CHECK(strip_ptx_comments("a // b\nc /* d\n e */ f") == "a     \nc     \n      f");
}

// A module of three kernels and a helper, written by hand: the launched kernel's class is its own
// and its callees', never another kernel's.
static const char* kHandPtx = R"ptx(
.version 8.5
.target sm_90
.address_size 64

.func  (.param .b32 func_retval0) narrow(.param .b32 narrow_param_0)
{
  .reg .b16 %rs<2>;
  .reg .f32 %f<3>;
  ld.param.f32 %f1, [narrow_param_0];
  cvt.rn.f16.f32 %rs1, %f1;
  cvt.f32.f16 %f2, %rs1;
  st.param.f32 [func_retval0+0], %f2;
  ret;
}
.global .align 8 .u64 table[1] = {narrow};

.visible .entry plain(.param .u64 plain_param_0)
{
  .reg .f32 %f<3>;
  .pragma "nounroll";
  fma.rn.f32 %f1, %f2, %f2, %f2;
  ret;
}
.visible .entry never_launched()
{
  .reg .b32 %r<4>;
  fma.rn.f16x2 %r1, %r2, %r3, %r1;
  ret;
}
.visible .entry direct()
{
  .reg .f32 %f<3>;
  { // callseq 0, 0
  .param .b32 param0;
  st.param.f32 [param0+0], %f1;
  .param .b32 retval0;
  call.uni (retval0),
  narrow,
  (
  param0
  );
  }
  ret;
}
.visible .entry through_table()
{
  .reg .b64 %rd<3>;
  .reg .f32 %f<3>;
  ld.global.u64 %rd1, [table];
  {
  .param .b32 param0;
  .param .b32 retval0;
  prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
  call (retval0), %rd1, (param0), prototype_0;
  }
  ret;
}
)ptx";

TEST_CASE("ptx scan: functions, the call graph, and kernels never launched") {
  PtxModule m = scan_ptx(kHandPtx);
  REQUIRE(m.functions.count("plain"));
  CHECK(m.functions.at("plain").entry);
  CHECK_FALSE(m.functions.at("narrow").entry);
  CHECK(m.functions.at("narrow").precision == "fp16");
  CHECK(m.functions.at("direct").callees == std::set<std::string>{"narrow"});
  CHECK(m.functions.at("through_table").indirect_call);
  CHECK(m.variables.at("table").count("narrow"));
  CHECK(m.entries().size() == 4);
  auto k = kernel_precisions(m, {"plain", "direct", "through_table", "never_launched", "no_such_kernel"});
  CHECK(k["plain"] == "fp32");
  CHECK(k["direct"] == "fp16");          // through its callee
  CHECK(k["through_table"] == "fp16");   // through a function pointer in a module variable
  CHECK(k["never_launched"] == "fp16");
  CHECK(k["no_such_kernel"] == "fp16");  // unknown: the whole module's lowest
  // One fp16 instruction in a kernel the plan never launches does not make the record fp16.
  CHECK(ptx_precision(kHandPtx, {"plain"}) == "fp32");
  CHECK(ptx_precision(kHandPtx, {"plain", "direct"}) == "fp16");
  CHECK(ptx_precision(kHandPtx) == "fp16");  // the whole text
}

TEST_CASE("ptx scan: a name that starts with call is no call") {
  // Session 34: `[calls_made]` read as a call of "s_made" (an extern the rules refuse) in an honest
  // kernel that counts in a module variable; the calls that are calls are still seen, with or
  // without a return list, through a register too.
  const std::string ptx = R"ptx(
.version 8.0
.target sm_90
.address_size 64
.global .align 4 .u32 calls_made;
.func callback(.param .b32 x) { ret; }
.func (.param .b32 r) callee2(.param .b32 x) { ret; }
.visible .entry k(.param .u64 p) {
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.global.u32 %r1, [calls_made];
  add.s32 %r2, %r1, 1;
  st.global.u32 [calls_made], %r2;
  mov.u64 %rd1, callback;
  { .param .b32 a; st.param.b32 [a], %r1; call.uni callback, (a); }
  { .param .b32 a; .param .b32 r; st.param.b32 [a], %r1; call.uni(r), callee2, (a); }
  { .param .b32 a; .param .b32 r; st.param.b32 [a], %r1; call (r), callee2, (a); }
  ret;
}
)ptx";
  PtxModule m = scan_ptx(ptx);
  REQUIRE(m.functions.count("k"));
  CHECK(m.functions.at("k").callees == std::set<std::string>{"callback", "callee2"});
  CHECK_FALSE(m.functions.at("k").indirect_call);
  CHECK(m.call_targets == std::set<std::string>{"callback", "callee2"});
}

TEST_CASE("ptx scan: an indirect call reaches every kernel's code, launched or not") {
  // A function's address plus an offset can land in any code of the module, a kernel's the plan
  // never launches included: a kernel that calls through a register counts the whole module.
  const std::string ptx = R"ptx(
.func (.param .b32 r) exact(.param .b32 a)
{
  ret;
}
.visible .entry half_never_launched()
{
  .reg .b32 %r<4>;
  fma.rn.f16x2 %r1, %r2, %r3, %r1;
  ret;
}
.visible .entry plain()
{
  ret;
}
.visible .entry jumps()
{
  .reg .b64 %rd<3>;
  mov.u64 %rd1, exact;
  add.u64 %rd2, %rd1, 4096;
  {
  .param .b32 param0;
  .param .b32 retval0;
  prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
  call (retval0), %rd2, (param0), prototype_0;
  }
  ret;
}
)ptx";
  auto k = kernel_precisions(scan_ptx(ptx), {"plain", "jumps"});
  CHECK(k["plain"] == "fp32");
  CHECK(k["jumps"] == "fp16");
  CHECK(reachable_functions(scan_ptx(ptx), "jumps").count("half_never_launched"));
}

TEST_CASE("ptx scan: strings and comments cannot hide an instruction") {
  // Under every reading of the string (escapes or not), the instruction after it is seen.
  for (const std::string hide : {R"(.pragma "//";)", R"(.pragma "a\"; //";)", R"(.pragma "/*"; )", "// \"\n", "/* \" */"}) {
    std::string ptx = ".visible .entry k()\n{\n  .reg .b32 %r<4>;\n  " + hide + " fma\n  .rn\n  .f16x2 %r1, %r2, %r3, %r1;\n  ret;\n}\n";
    CHECK_MESSAGE(ptx_precision(ptx, {"k"}) == "fp16", hide);
  }
  // In a comment it is not executed: it does not count.
  CHECK(ptx_precision(".visible .entry k()\n{\n  // fma.rn.f16x2 %r1, %r2, %r3, %r1;\n  /* cvt.rn.f16.f32 */ ret;\n}\n", {"k"}) == "fp32");
  // A declaration is not an instruction.
  CHECK(ptx_precision(".visible .entry k()\n{\n  .reg .f16 %h<3>;\n  .reg .b16 %rs<2>;\n  ret;\n}\n", {"k"}) == "fp32");
  // A body closed early by inline asm: the new top-level function is read as ptxas reads it.
  std::string injected = ".visible .entry k()\n{\n ret;\n}\n.func evil()\n{\n cvt.rn.bf16.f32 %rs1, %f1;\n}\n.visible .entry j()\n{\n call.uni evil, ();\n ret;\n}\n";
  CHECK(ptx_precision(injected, {"k"}) == "fp32");
  CHECK(ptx_precision(injected, {"j"}) == "bf16");
}

TEST_CASE("ptx scan: heap and extern symbols") {
  for (std::string n : {"malloc", "free", "__nv_aligned_device_malloc", "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm",
                        "_ZnwmRKSt9nothrow_t", "_ZnwmSt11align_val_t", "cudaMalloc", "realloc",
                        "__cuda_syscall_aligned_malloc", "__cuda_syscall_free"})
    CHECK_MESSAGE(is_heap_symbol(n), n);
  for (std::string n : {"vprintf", "__assertfail", "_Z6narrowf", "freeze"}) CHECK_FALSE_MESSAGE(is_heap_symbol(n), n);
  CHECK(is_allowed_extern("vprintf"));
  CHECK(is_allowed_extern("__assertfail"));
  CHECK_FALSE(is_allowed_extern("malloc"));
}

// Every spelling of reduced precision, compiled by NVRTC: each kernel reports its true class.
static const char* kSpellings = R"cu(#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <mma.h>
using namespace nvcuda;
__global__ void k_fp32(const float* x, float* y) { y[threadIdx.x] = fmaf(x[threadIdx.x], 2.0f, 1.0f); }
__global__ void k_mma_newline(const unsigned* a, float* d) {
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("mma\n  .sync\n\t.aligned.m16n8k16.row.col.f32\n.f16 .f16\r\n.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]));
  d[threadIdx.x] = d0 + d1 + d2 + d3;
}
__global__ void k_mma_comment(const unsigned* a, float* d) {
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("mma/* a comment */.sync.aligned // and one to the end of the line\n .m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]));
  d[threadIdx.x] = d0 + d1 + d2 + d3;
}
__global__ void k_imma(const unsigned* a, float* d) {
  int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]));
  d[threadIdx.x] = float(d0 + d1 + d2 + d3);
}
__global__ void k_wmma(const half* a, const half* b, float* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
__global__ void k_wmma_tf32(const float* a, const float* b, float* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
__global__ void k_half2(const float* x, float* y) {
  __half2 h = __floats2half2_rn(x[0], x[1]);
  h = __hfma2(h, h, h);
  y[threadIdx.x] = __low2float(h) + __high2float(h);
}
__global__ void k_float2half(const float* x, float* y) { y[threadIdx.x] = __half2float(__float2half(x[threadIdx.x])); }
__global__ void k_bf16(const float* x, float* y) { y[threadIdx.x] = __bfloat162float(__float2bfloat16(x[threadIdx.x])); }
__global__ void k_dp4a(const int* x, float* y) { y[threadIdx.x] = float(__dp4a(x[0], x[1], 0)); }
__global__ void k_fp8(const float* x, float* y) {
  __nv_fp8x2_storage_t s = __nv_cvt_float2_to_fp8x2(make_float2(x[0], x[1]), __NV_SATFINITE, __NV_E4M3);
  y[threadIdx.x] = float(s);
}
__device__ __noinline__ float narrow(float v) { return __half2float(__float2half(v)); }
__global__ void k_calls(const float* x, float* y) { y[threadIdx.x] = narrow(x[threadIdx.x]); }
__device__ float (*g_fn)(float) = narrow;
__global__ void k_pointer(const float* x, float* y) { y[threadIdx.x] = g_fn(x[threadIdx.x]); }
__global__ void k_tf32_cvt(const float* x, float* y) { unsigned u; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x[0])); y[threadIdx.x] = __uint_as_float(u); }
__global__ void k_quant(const float* x, signed char* y) { y[threadIdx.x] = (signed char)__float2int_rn(x[threadIdx.x]); }
__global__ void k_cvt_s8(const float* x, float* y) { short v; asm("cvt.rni.sat.s8.f32 %0, %1;" : "=h"(v) : "f"(x[0])); y[0] = v; }
)cu";

TEST_CASE("ptx scan: every spelling compiled by NVRTC reports its true precision") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  const std::map<std::string, std::string> want = {
      {"k_fp32", "fp32"},       {"k_mma_newline", "fp16"}, {"k_mma_comment", "bf16"}, {"k_imma", "int8"},
      {"k_wmma", "fp16"},       {"k_wmma_tf32", "tf32"},   {"k_half2", "fp16"},       {"k_float2half", "fp16"},
      {"k_bf16", "bf16"},       {"k_dp4a", "int8"},        {"k_fp8", "fp8"},          {"k_calls", "fp16"},
      {"k_tf32_cvt", "tf32"},   {"k_cvt_s8", "int8"},
      // Through a function pointer: a call through a register can land anywhere in the module's
      // code, so the whole module counts (k_fp8's conversion the lowest).
      {"k_pointer", "fp8"},
      // A float rounded to an integer and stored in a char: integer work; the calibrated tolerance,
      // not the opcode scan, judges such emulation.
      {"k_quant", "fp32"}};
  std::vector<std::string> names;
  for (const auto& [n, p] : want) names.push_back(n);
  CompileOptions opt;
  opt.use_cache = false;
  CompileResult r = compile_bundle({{"k.cu", kSpellings}}, names, opt);
  REQUIRE_MESSAGE(r.ok, r.log);
  PtxModule m = scan_ptx(r.ptx);
  for (const auto& [n, p] : want) {
    REQUIRE(r.lowered.count(n));
    CHECK_MESSAGE(kernel_precisions(m, {r.lowered.at(n)}).at(r.lowered.at(n)) == p, n);
  }
  // The record launches only k_fp32: fp32, whatever else the module holds.
  CHECK(ptx_precision(r.ptx, {r.lowered.at("k_fp32")}) == "fp32");
  CHECK(ptx_precision(r.ptx, {r.lowered.at("k_fp32"), r.lowered.at("k_bf16")}) == "bf16");
  CHECK(ptx_precision(r.ptx) == "fp8");
}

// wgmma (sm_90a only: NVRTC's sm_90 target refuses it, so a bundle judged for sm_90 cannot use it)
// by its operand types, a line break inside its modifiers too.
const char* const kWgmma = R"cu(#define WG_F(name, op, extra)                                                                         \
  __global__ void name(const unsigned long long* desc, float* y) {                                     \
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;                                                      \
    asm volatile("wgmma.fence.sync.aligned;\n" op " {%0, %1, %2, %3}, %4, %5, 1" extra ";\n"           \
                 "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;"                  \
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(desc[0]), "l"(desc[1]));               \
    y[threadIdx.x] = d0 + d1 + d2 + d3;                                                                \
  }
WG_F(k_wgmma_f16, "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", ", 1, 1, 0, 0")
WG_F(k_wgmma_bf16, "wgmma.mma_async.sync.aligned.m64n8k16.f32\n .bf16.bf16", ", 1, 1, 0, 0")
WG_F(k_wgmma_tf32, "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32", ", 1, 1")
WG_F(k_wgmma_fp8, "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2", ", 1, 1")
__global__ void k_wgmma_s8(const unsigned long long* desc, float* y) {
  int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("wgmma.fence.sync.aligned;\nwgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8 {%0, %1, %2, %3}, %4, %5, 1;\n"
               "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;"
               : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3) : "l"(desc[0]), "l"(desc[1]));
  y[threadIdx.x] = (float)(d0 + d1 + d2 + d3);
}
)cu";

TEST_CASE("ptx scan: wgmma compiled for sm_90a reads by its operand types") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  const std::map<std::string, std::string> want = {{"k_wgmma_f16", "fp16"}, {"k_wgmma_bf16", "bf16"}, {"k_wgmma_tf32", "tf32"},
                                                   {"k_wgmma_fp8", "fp8"},  {"k_wgmma_s8", "int8"}};
  std::vector<std::string> names;
  for (const auto& [n, p] : want) names.push_back(n);
  CompileOptions opt;
  opt.arch = "sm_90a";
  opt.use_cache = false;
  CompileResult r = compile_bundle({{"k.cu", kWgmma}}, names, opt);
  REQUIRE_MESSAGE(r.ok, r.log);
  PtxModule m = scan_ptx(r.ptx);
  for (const auto& [n, p] : want) {
    REQUIRE(r.lowered.count(n));
    CHECK_MESSAGE(kernel_precisions(m, {r.lowered.at(n)}).at(r.lowered.at(n)) == p, n);
  }
}

TEST_CASE("ptx scan: an .alias injected by inline asm leads to the function it names") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  // inj's asm closes its body and declares `al` as an alias of the fp16 function; k calls `al`.
  const char* src = R"cu(#include <cuda_fp16.h>
extern "C" __device__ __noinline__ float narrow(float v) { return __half2float(__float2half(v)); }
__global__ void keep(float* y) { y[0] = narrow(y[0]); }
__global__ void inj() { asm volatile("ret;\n}\n.func (.param .b32 r) al (.param .b32 p);\n.alias al, narrow;\n.visible .entry inj2()\n{\n"); }
__global__ void k(float* y) {
  float r;
  asm volatile("{ .param .b32 pa; .param .b32 re; st.param.f32 [pa], %1; call.uni (re), al, (pa); ld.param.f32 %0, [re]; }" : "=f"(r) : "f"(y[0]));
  y[0] = r;
}
)cu";
  CompileOptions opt;
  opt.use_cache = false;
  CompileResult r = compile_bundle({{"k.cu", src}}, {"k", "inj"}, opt);
  REQUIRE_MESSAGE(r.ok, r.log);
  PtxModule m = scan_ptx(r.ptx);
  CHECK(m.functions.count("inj2"));  // the injected kernel is a kernel like any other
  CHECK(ptx_precision(r.ptx, {r.lowered.at("k")}) == "fp16");
  CHECK(ptx_precision(r.ptx, {r.lowered.at("inj")}) == "fp32");
}

TEST_CASE("ptx scan: linear in the size of the module") {
  // 4,000 functions of 40 instructions each (about 7 MB): scanned in well under the compile's time.
  std::string ptx = ".version 8.5\n.target sm_90\n.address_size 64\n";
  for (int f = 0; f < 4000; ++f) {
    ptx += ".visible .entry k" + std::to_string(f) + "(.param .u64 p)\n{\n  .reg .f32 %f<4>;\n";
    for (int i = 0; i < 40; ++i) ptx += "  fma.rn.f32 %f1, %f2, %f3, %f1; // step\n";
    ptx += "  ret;\n}\n";
  }
  ptx += ".visible .entry last()\n{\n  cvt.rn.f16.f32 %rs1, %f1;\n}\n";
  auto t0 = std::chrono::steady_clock::now();
  PtxModule m = scan_ptx(ptx);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(m.functions.size() == 4001);
  CHECK(kernel_precisions(m, {"k17", "last"}) == std::map<std::string, std::string>{{"k17", "fp32"}, {"last", "fp16"}});
  CHECK_MESSAGE(s < 20.0, "scan took " << s << " s");
}
