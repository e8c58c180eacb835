// Units for the bundle library (libcommon/bundle): expressions, signatures, plans, compare, compile.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/bundle/expr.hpp"
#include "libcommon/bundle/plan.hpp"
#include "libcommon/bundle/signature.hpp"
#include "libcommon/bundle/compare.hpp"
#include "libcommon/cuda/nvrtc.hpp"

using namespace ca::bundle;

static ExprContext ctx_of(std::map<std::string, Value> vars) {
  return ExprContext{[vars](const std::string& r) -> std::optional<Value> {
    auto it = vars.find(r);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  }};
}

TEST_CASE("expressions: arithmetic, functions, references") {
  auto c = ctx_of({{"N", Value::integer(1000)}, {"inputs.0.shape[1]", Value::integer(64)}});
  CHECK(Expr::parse("cdiv(N, 256)").eval_int(c) == 4);
  CHECK(Expr::parse("cdiv(1024, 256)").eval_int(c) == 4);
  CHECK(Expr::parse("min(N, 7, 9) + max(1, 2)").eval_int(c) == 9);
  CHECK(Expr::parse("-(N - 1) / 3 * 2 % 7").eval_int(c) == (-(999) / 3 * 2 % 7));
  CHECK(Expr::parse("inputs.0.shape[1] * 2").eval_int(c) == 128);
  CHECK(Expr::parse("N / 3").eval_int(c) == 333);  // C division
  // sqrt is a float (attention's 1 / sqrt(D) as a scale argument); a negative argument is an error.
  CHECK(Expr::parse("sqrt(64)").eval(c).is_float);
  CHECK(Expr::parse("1.0 / sqrt(64)").eval(c).f == doctest::Approx(0.125));
  CHECK_THROWS_WITH_AS(Expr::parse("sqrt(1 - N)").eval(c), doctest::Contains("sqrt of a negative number"), ExprError);
  CHECK_THROWS_WITH_AS(Expr::parse("sqrt(1, 2)"), doctest::Contains("sqrt takes 1 argument"), ExprError);
  // pick(i, v0, v1, ...): the i-th value, its own type; an index out of range names the range.
  CHECK(Expr::parse("pick(2, 6, 12, 24, 16)").eval_int(c) == 24);
  CHECK(Expr::parse("pick(N - 999, 6, 2.5)").eval(c).f == doctest::Approx(2.5));
  CHECK_THROWS_WITH_AS(Expr::parse("pick(4, 6, 12, 24, 16)").eval(c), doctest::Contains("pick index 4 is not one of 0..3"), ExprError);
  CHECK_THROWS_WITH_AS(Expr::parse("pick(0.5, 1, 2)").eval(c), doctest::Contains("integer index"), ExprError);
  CHECK_THROWS_WITH_AS(Expr::parse("pick(1)"), doctest::Contains("pick takes an index"), ExprError);
  Value f = Expr::parse("N * 0.5").eval(c);
  CHECK(f.is_float);
  CHECK(f.f == doctest::Approx(500.0));
  CHECK(Expr::parse("2.0f").eval(c).is_float);
  CHECK_FALSE(Expr::parse("N+1").is_integral() == false);
  CHECK(Expr::parse("cdiv(inputs.x.shape[-1], 4)").references() == std::set<std::string>{"inputs.x.shape[-1]"});
  CHECK_THROWS_WITH_AS(Expr::parse("M + 1").eval(c), doctest::Contains("unbound name 'M'"), ExprError);
  CHECK_THROWS_AS(Expr::parse("cdiv(N,").eval(c), ExprError);
  CHECK_THROWS_AS(Expr::parse("foo(1)").eval(c), ExprError);
  CHECK_THROWS_WITH_AS(Expr::parse("N / (N - N)").eval(c), doctest::Contains("division by zero"), ExprError);
  CHECK_THROWS_AS(Expr::parse("1 2").eval(c), ExprError);
  // 64-bit arithmetic is checked: a wrap is an error, INT64_MIN / -1 is an error and not a trap.
  for (const char* e : {"9223372036854775807 + 1", "(-9223372036854775807 - 1) - 1", "N * 9223372036854775807",
                        "(-9223372036854775807 - 1) / -1", "-(-9223372036854775807 - 1)", "cdiv(-9223372036854775807 - 1, -1)"})
    CHECK_THROWS_WITH_AS(Expr::parse(e).eval(c), doctest::Contains("integer overflow"), ExprError);
  CHECK(Expr::parse("(-9223372036854775807 - 1) % -1").eval_int(c) == 0);
  CHECK(Expr::parse("cdiv(9223372036854775807, 2)").eval_int(c) == 4611686018427387904LL);
  CHECK(Expr::parse("cdiv(N, 256)").eval_int(c) == 4);
  CHECK(Expr::parse("cdiv(0 - N, 256)").eval_int(c) == (-1000 + 255) / 256);  // C semantics kept for negatives
  // Size limits bound the recursion: length, then nesting of parentheses, signs and calls.
  CHECK_THROWS_WITH_AS(Expr::parse(std::string(2000, '(') + "N" + std::string(2000, ')')), doctest::Contains("limit: expression length"), ExprError);
  CHECK_THROWS_WITH_AS(Expr::parse(std::string(65, '(') + "N" + std::string(65, ')')), doctest::Contains("limit: expression nesting"), ExprError);
  CHECK_THROWS_WITH_AS(Expr::parse(std::string(65, '-') + "N"), doctest::Contains("limit: expression nesting"), ExprError);
  std::string calls = "N";
  for (int i = 0; i < 65; ++i) calls = "max(" + calls + ", 1)";
  CHECK_THROWS_WITH_AS(Expr::parse(calls), doctest::Contains("limit: expression nesting"), ExprError);
  CHECK(Expr::parse(std::string(64, '(') + "N" + std::string(64, ')')).eval_int(c) == 1000);
  CHECK(Expr::parse(std::string(64, '-') + "N").eval_int(c) == 1000);
}

TEST_CASE("signatures from mangled names") {
  auto s = demangle_kernel("_Z9scale_addPKfS0_Pfif");
  REQUIRE(s);
  CHECK(s->name == "scale_add");
  REQUIRE(s->params.size() == 5);
  CHECK(s->params[0].kind == ParamType::kPointer);
  CHECK(s->params[0].is_const);
  CHECK(s->params[0].dtype == "F32");
  CHECK(s->params[1].text == "const float*");
  CHECK(s->params[2].text == "float*");
  CHECK_FALSE(s->params[2].is_const);
  CHECK(s->params[3].kind == ParamType::kInteger);
  CHECK(s->params[4].kind == ParamType::kFloat);

  auto t = demangle_kernel("_Z12softmax_rowsILi256EEvPKfPfii");
  REQUIRE(t);
  CHECK(t->name == "softmax_rows");
  REQUIRE(t->params.size() == 4);
  CHECK(t->params[0].text == "const float*");

  auto h = demangle_kernel("_Z4gelu6__halfP13__nv_bfloat16PK6float4l");
  REQUIRE(h);
  REQUIRE(h->params.size() == 4);
  CHECK(h->params[0].dtype == "F16");
  CHECK(h->params[1].dtype == "BF16");
  CHECK(h->params[2].dtype == "F32");
  CHECK(h->params[2].lanes == 4);
  CHECK(h->params[3].size_bytes == 8);

  auto tp = demangle_kernel("_Z4copyIfEvPKT_PS0_i");  // template<class T> copy(const T*, T*, int)
  REQUIRE(tp);
  REQUIRE(tp->params.size() == 3);
  CHECK(tp->params[0].text == "const float*");
  CHECK(tp->params[1].text == "float*");

  auto ns = demangle_kernel("_ZN2ns6kernelEPfj");
  REQUIRE(ns);
  CHECK(ns->name == "kernel");
  CHECK(ns->params.size() == 2);
  CHECK_FALSE(demangle_kernel("plain_c_name"));

  std::string ptx = ".visible .entry plain(\n\t.param .u64 plain_param_0,\n\t.param .u32 plain_param_1,\n\t.param .f32 plain_param_2\n)\n{";
  auto p = ptx_signature(ptx, "plain");
  REQUIRE(p);
  REQUIRE(p->params.size() == 3);
  CHECK(p->params[0].size_bytes == 8);
  CHECK(p->params[1].kind == ParamType::kInteger);
  CHECK(p->params[2].kind == ParamType::kFloat);
}

static Signatures scale_add_sigs() { return {{"scale_add", *demangle_kernel("_Z9scale_addPKfS0_Pfif")}}; }

static const char* kPlan = R"j(dims: {N: inputs.0.shape[0]}
forward:
  - launch: scale_add
    grid: [cdiv(N, 256)]
    block: [256]
    args: [inputs.0, inputs.1, outputs.0, N, 2.0]
)j";

static IoSpec io_for(int64_t n) {
  return IoSpec::from_json(ca::Json::parse(R"j({"inputs":[{"name":"a","shape":[)j" + std::to_string(n) +
                                           R"j(],"dtype":"float32"},{"name":"b","shape":[)j" + std::to_string(n) +
                                           R"j(],"dtype":"F32"}],"outputs":[{"shape":[)j" + std::to_string(n) + R"j(],"dtype":"F32"}]})j"));
}

TEST_CASE("plan: the DESIGN.md example parses, checks and binds") {
  Plan plan = Plan::parse_text(kPlan);
  CHECK(plan.dims.size() == 1);
  CHECK(plan.forward.size() == 1);
  CHECK(plan.kernel_names() == std::vector<std::string>{"scale_add"});
  check_plan(plan, scale_add_sigs(), nullptr);  // without shapes
  IoSpec io = io_for(1000);
  BoundPlan b = bind_plan(plan, scale_add_sigs(), io);
  REQUIRE(b.forward.size() == 1);
  CHECK(b.forward[0].launch.grid[0] == 4);
  CHECK(b.forward[0].launch.block[0] == 256);
  CHECK(b.forward[0].launch.mangled == "_Z9scale_addPKfS0_Pfif");
  REQUIRE(b.forward[0].launch.args.size() == 5);
  int n = 0;
  std::memcpy(&n, b.forward[0].launch.args[3].scalar.data(), 4);
  CHECK(n == 1000);
  float alpha = 0;
  std::memcpy(&alpha, b.forward[0].launch.args[4].scalar.data(), 4);
  CHECK(alpha == 2.0f);
  CHECK(b.buffers[b.forward[0].launch.args[2].buffer].ref == "outputs.0");
  // The same plan as a JSON object.
  ca::Json j = ca::Json::parse(R"j({"dims":{"N":"inputs.a.shape[0]"},"forward":[{"launch":"scale_add","grid":["cdiv(N,256)"],"block":[256],"args":["inputs.0","inputs.1","outputs.0","N",2.0]}]})j");
  BoundPlan bj = bind_plan(Plan::parse(j), scale_add_sigs(), io);
  CHECK(bj.forward[0].launch.grid[0] == 4);
}

TEST_CASE("plan errors name the step and argument") {
  auto err = [](const std::string& text, const IoSpec* io = nullptr) {
    try {
      Plan p = Plan::parse_text(text);
      check_plan(p, scale_add_sigs(), io);
    } catch (const PlanError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string base = kPlan;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  CHECK(err(with("N, 2.0]", "2.0]")).find("4 arguments given, kernel scale_add takes 5") != std::string::npos);
  CHECK(err(with("N, 2.0]", "N, 2]")).find("argument 5 is int") != std::string::npos);
  CHECK(err(with("cdiv(N", "cdiv(Q")).find("unbound name 'Q'") != std::string::npos);
  CHECK(err(with("launch: scale_add", "launch: nope")).find("not defined") != std::string::npos);
  CHECK(err(with("outputs.0, N", "inputs.1, N")).find("outputs.0 is never written") != std::string::npos);
  CHECK(err(with("forward:", "scratch:\n  t: {dtype: float32, shape: [N]}\nforward:")) == "no error");
  CHECK(err(with("args: [inputs.0", "args: [scratch.nope")).find("scratch.nope is not declared") != std::string::npos);
  IoSpec io = io_for(10);
  CHECK(err(with("args: [inputs.0", "args: [inputs.2"), &io).find("inputs.2 does not exist") != std::string::npos);
  IoSpec half = IoSpec::from_json(ca::Json::parse(R"j({"inputs":[{"shape":[4],"dtype":"float16"},{"shape":[4],"dtype":"float16"}],"outputs":[{"shape":[4],"dtype":"float16"}]})j"));
  CHECK(err(kPlan, &half).find("(F16), kernel expects const float*") != std::string::npos);
}

TEST_CASE("gemm binding infers m, n, k from shapes") {
  Plan p = Plan::parse_text(R"j(forward:
  - gemm: {a: inputs.0, b: params.w, trans_b: true, bias: params.b, activation: relu, out: outputs.0}
)j");
  IoSpec io = IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[8,32],"dtype":"F32"}],"params":[{"name":"w","shape":[16,32],"dtype":"F32"},{"name":"b","shape":[16],"dtype":"F32"}],"outputs":[{"shape":[8,16],"dtype":"F32"}]})j"));
  BoundPlan b = bind_plan(p, {}, io);
  CHECK(b.forward[0].gemm.m == 8);
  CHECK(b.forward[0].gemm.n == 16);
  CHECK(b.forward[0].gemm.k == 32);
  CHECK(b.forward[0].gemm.activation == "relu");
  Plan bad = Plan::parse_text("forward:\n  - gemm: {a: inputs.0, b: params.w, out: outputs.0}\n");
  CHECK_THROWS_WITH_AS(bind_plan(bad, {}, io), doctest::Contains("inner sizes differ"), PlanError);
}

TEST_CASE("precision from PTX and ELF sections") {
  CHECK(ca::bundle::ptx_precision("fma.rn.f32 %f1, %f2, %f3, %f4;") == "fp32");
  CHECK(ca::bundle::ptx_precision("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == "tf32");
  CHECK(ca::bundle::ptx_precision("fma.rn.f16 %h1, %h2, %h3, %h4;") == "fp16");
  CHECK(ca::bundle::ptx_precision("fma.rn.bf16x2 %r1, %r2, %r3, %r4;") == "bf16");
  CHECK(ca::bundle::cubin_sections("not an elf").empty());
}

TEST_CASE("compare: tolerances, a NaN where the reference has none, reasons") {
  auto t = [](std::vector<float> v) {
    ca::Tensor x = ca::Tensor::zeros("F32", {static_cast<int64_t>(v.size())});
    std::memcpy(x.data.data(), v.data(), v.size() * 4);
    return x;
  };
  ca::TensorMap want{{"outputs.0", t({1, 2, 3, 100})}};
  auto ok = ca::bundle::compare_outputs({{"outputs.0", t({1.005f, 2, 3, 100.5f})}}, want, "default", -1, -1);
  CHECK(ok.ok);
  CHECK(ok.max_abs_err == doctest::Approx(0.5));
  auto strict = ca::bundle::compare_outputs({{"outputs.0", t({1.005f, 2, 3, 100})}}, want, "strict", -1, -1);
  CHECK_FALSE(strict.ok);
  CHECK(strict.reason.find("outputs.0[0]: expected 1, got 1.005") != std::string::npos);
  auto nan = ca::bundle::compare_outputs({{"outputs.0", t({1, 2, NAN, 100})}}, want, "default", -1, -1);
  CHECK_FALSE(nan.ok);
  CHECK(nan.reason.find("outputs.0[2]: expected 3, got nan") != std::string::npos);
  CHECK(nan.mismatch_fraction == doctest::Approx(0.25));
  auto zeros = ca::bundle::compare_outputs({{"outputs.0", t({0, 0, 0, 0})}}, want, "default", -1, -1);
  CHECK(zeros.reason.find("4 of 4 elements differ") != std::string::npos);
}

TEST_CASE("compare: a zero or constant output fails the relative error norm where allclose would pass") {
  auto t = [](std::vector<float> v) {
    ca::Tensor x = ca::Tensor::zeros("F32", {static_cast<int64_t>(v.size())});
    std::memcpy(x.data.data(), v.data(), v.size() * 4);
    return x;
  };
  // Every reference value below atol (1e-2): zeros are elementwise within tolerance.
  ca::TensorMap small{{"outputs.0", t({3e-3f, -2e-3f, 5e-3f, -4e-3f, 1e-3f, 2e-3f})}};
  auto zeros = ca::bundle::compare_outputs({{"outputs.0", t({0, 0, 0, 0, 0, 0})}}, small, "default", -1, -1);
  CHECK_FALSE(zeros.ok);
  CHECK(zeros.rel_l2_err == doctest::Approx(1.0));
  CHECK(zeros.reason.find("relative error norm") != std::string::npos);
  auto constant = ca::bundle::compare_outputs({{"outputs.0", t({1e-3f, 1e-3f, 1e-3f, 1e-3f, 1e-3f, 1e-3f})}}, small, "default", -1, -1);
  CHECK_FALSE(constant.ok);
  // The honest answer, a little off in the last digits, passes.
  auto near = ca::bundle::compare_outputs({{"outputs.0", t({3.001e-3f, -2e-3f, 5e-3f, -4.002e-3f, 1e-3f, 2e-3f})}}, small, "default", -1,
                                          -1);
  CHECK(near.ok);
  CHECK(near.rel_l2_err < 1e-3);
  // An all-zero reference: the norm is not defined, allclose decides.
  ca::TensorMap zero_ref{{"outputs.0", t({0, 0, 0})}};
  CHECK(ca::bundle::compare_outputs({{"outputs.0", t({0, 0, 0})}}, zero_ref, "default", -1, -1).ok);
  // Gigabyte outputs are compared in chunks: a difference past the first chunk is found.
  std::vector<float> big(3u << 20, 1.0f), off = big;
  off[(3u << 20) - 5] = 2.0f;
  auto far = ca::bundle::compare_outputs({{"outputs.0", t(off)}}, {{"outputs.0", t(big)}}, "default", -1, -1);
  CHECK_FALSE(far.ok);
  CHECK(far.reason.find("outputs.0[3145723]") != std::string::npos);
}

TEST_CASE("precision: int8 and fp8 from the PTX") {
  CHECK(ca::bundle::ptx_precision("dp4a.s32.s32 %r1, %r2, %r3, %r4;") == "int8");
  CHECK(ca::bundle::ptx_precision("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32") == "int8");
  CHECK(ca::bundle::ptx_precision("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32") == "fp8");
  CHECK(ca::bundle::ptx_precision("cvt.rn.satfinite.e5m2x2.f32") == "fp8");
}

TEST_CASE("plan bounds: alias bombs, nesting bombs and oversize text are plan errors") {
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 8; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) bomb += std::string(k ? ", " : "") + "*a" + std::to_string(i - 1);
    bomb += "]\n";
  }
  bomb += "forward: []\n";
  CHECK_THROWS_WITH_AS(Plan::parse_text(bomb), doctest::Contains("limit: plan nodes"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("forward: " + std::string(100000, '[') + std::string(100000, ']')),
                       doctest::Contains("limit: plan depth"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("forward: []\n#" + std::string(2 << 20, 'x')), doctest::Contains("limit: plan size"), PlanError);
  // Brackets inside quotes and comments are not nesting: this plan passes the bound (and parses).
  std::string deep_text = "# " + std::string(100, '[') + "\ndims: {N: inputs.0.shape[0]}\nforward:\n  - launch: '" + std::string(100, '[') +
                          "'\n    grid: [1]\n    block: [1]\n";
  Plan quoted = Plan::parse_text(deep_text);
  CHECK(quoted.forward.size() == 1);
}

TEST_CASE("plan: an unknown key names itself and the nearest valid one") {
  const std::string base = "forward:\n  - gemm: {a: inputs.0, b: params.w, out: outputs.0, activaton: relu}\n";
  CHECK_THROWS_WITH_AS(Plan::parse_text(base), doctest::Contains("unknown key 'activaton' (did you mean 'activation'?)"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("forwrd: []\n"), doctest::Contains("did you mean 'forward'?"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("forward:\n  - launch: k\n    grid: [1]\n    block: [1]\n    arg: [inputs.0]\n"),
                       doctest::Contains("unknown key 'arg' (did you mean 'args'?)"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("scratch:\n  t: {dtype: float32, shape: [4], align: 16}\nforward: []\n"),
                       doctest::Contains("unknown key 'align'"), PlanError);
}

TEST_CASE("compile: bundle file names that would inject into the main file are refused") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  CompileOptions opt;
  opt.use_cache = false;
  for (std::string name : {"a\".cu", "x.cu\"\n#include \"/etc/passwd", "/etc/passwd", "../x.cu", ".hidden.cu", "bundle_main.cu"}) {
    auto r = compile_bundle({{name, "__global__ void k() {}\n"}}, {"k"}, opt);
    CHECK_FALSE(r.ok);
    CHECK(r.first_error.find("bundle file name") != std::string::npos);
  }
  auto ok = compile_bundle({{"sub/k.cu", "__global__ void k() {}\n"}}, {"k"}, opt);
  CHECK(ok.ok);
}

TEST_CASE("compile: the confined compiler reads CUDA's headers and the bundle, nothing else") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  CompileOptions opt;
  opt.use_cache = false;
  auto fine = compile_bundle({{"k.cu", "#include <cuda_fp16.h>\n#include \"util.cuh\"\n__global__ void k(float* x) { x[0] = twice(1.0f); }\n"},
                              {"util.cuh", "__device__ inline float twice(float v) { return 2 * v; }\n"}},
                             {"k"}, opt);
  CHECK_MESSAGE(fine.ok, fine.log);
  auto host = compile_bundle({{"k.cu", "#include \"/etc/hostname\"\n__global__ void k() {}\n"}}, {"k"}, opt);
  CHECK_FALSE(host.ok);
  CHECK(host.log.find("cannot open source file") != std::string::npos);
}

TEST_CASE("module globals: the writable __device__ and __constant__ variables of a cubin, by name and size") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  CompileOptions opt;
  opt.use_cache = false;
  auto r = compile_bundle({{"k.cu", "__device__ int g_calls;\n__device__ float g_table[4] = {1, 2, 3, 4};\n__constant__ float c_k[2];\n"
                                    "__global__ void k(float* x) { g_calls += 1; x[0] = g_table[g_calls & 3] + c_k[0]; }\n"}},
                          {"k"}, opt);
  REQUIRE_MESSAGE(r.ok, r.log);
  auto globals = cubin_writable_globals(r.cubin);
  CHECK(globals.size() == 3);
  // A module whose symbol table cannot be read is not run (its variables would go unrestored).
  CHECK_THROWS_WITH_AS(cubin_writable_globals(r.cubin.substr(0, 64)), doctest::Contains("symbol table could not be read"),
                       std::runtime_error);
  CHECK(cubin_object_sections(r.cubin.substr(0, 64)).empty());
  CHECK(globals["g_calls"] == 4);
  CHECK(globals["g_table"] == 16);
  // __constant__ too: a kernel writes it through the generic address of its symbol, so the executor
  // restores it before every call, and the module cap counts it.
  CHECK(globals["c_k"] == 8);
  CHECK(r.module_constant_bytes >= 8);
  // By section, for the executor's whole-section restore: every variable inside its section, the
  // sections' sizes covering them (g_calls and g_table in .nv.global and .nv.global.init).
  int64_t objects = 0;
  for (const ModuleSection& sec : cubin_writable_sections(r.cubin)) {
    CHECK(sec.bytes > 0);
    for (const ModuleObject& o : sec.objects) {
      ++objects;
      CHECK(o.offset >= 0);
      CHECK(o.offset + o.bytes <= sec.bytes);
      CHECK(cubin_object_sections(r.cubin).at(o.name) == sec.name);
    }
  }
  CHECK(objects == 3);
  CHECK_THROWS_WITH_AS(cubin_writable_sections(r.cubin.substr(0, 64)), doctest::Contains("symbol table could not be read"),
                       std::runtime_error);
}

TEST_CASE("launch sizes are checked against the target arch's limits, before and at binding") {
  // 200,000 bytes of dynamic shared memory: sm_90 takes it (232,448), sm_80 (166,912) and sm_86
  // (101,376) do not; sizes from dims are checked when the plan is bound.
  const std::string with_shared = std::string(kPlan) + "    shared: 200000\n";
  Plan plan = Plan::parse_text(with_shared);
  check_plan(plan, scale_add_sigs(), nullptr, LaunchLimits::for_arch("sm_90"));
  CHECK_THROWS_WITH_AS(check_plan(plan, scale_add_sigs(), nullptr, LaunchLimits::for_arch("sm_80")),
                       doctest::Contains("sm_80 allows at most 166912 bytes"), PlanError);
  Plan from_dims = Plan::parse_text(std::string(kPlan) + "    shared: N * 4\n");
  check_plan(from_dims, scale_add_sigs(), nullptr, LaunchLimits::for_arch("sm_86"));  // N not known yet
  bind_plan(from_dims, scale_add_sigs(), io_for(25000), LaunchLimits::for_arch("sm_86"));  // 100,000 bytes
  CHECK_THROWS_WITH_AS(bind_plan(from_dims, scale_add_sigs(), io_for(30000), LaunchLimits::for_arch("sm_86")),
                       doctest::Contains("sm_86 allows at most 101376"), PlanError);
  bind_plan(from_dims, scale_add_sigs(), io_for(30000), LaunchLimits::for_arch("sm_90"));
  // A block or grid that is within the limits only for small inputs passes compile-only and is
  // refused at binding, by the same check and in the same words.
  const std::string base(kPlan);
  Plan big_block = Plan::parse_text(base.substr(0, base.find("    block: [256]")) + "    block: [N]\n" +
                                    base.substr(base.find("    args:")));
  check_plan(big_block, scale_add_sigs(), nullptr, LaunchLimits::for_arch("sm_90"));
  bind_plan(big_block, scale_add_sigs(), io_for(1024), LaunchLimits::for_arch("sm_90"));
  CHECK_THROWS_WITH_AS(bind_plan(big_block, scale_add_sigs(), io_for(2048), LaunchLimits::for_arch("sm_90")),
                       doctest::Contains("block[0] = 2048 (sm_90 allows 1 to 1024)"), PlanError);
  Plan two_d = Plan::parse_text(base.substr(0, base.find("    grid:")) + "    grid: [1, N]\n" +
                                base.substr(base.find("    block:")));
  check_plan(two_d, scale_add_sigs(), nullptr, LaunchLimits::for_arch("sm_90"));
  CHECK_THROWS_WITH_AS(bind_plan(two_d, scale_add_sigs(), io_for(70000), LaunchLimits::for_arch("sm_90")),
                       doctest::Contains("grid[1] = 70000 (sm_90 allows 1 to 65535)"), PlanError);
}

TEST_CASE("conv binds F32, F16 and BF16 buffers only (cuDNN is told one of them)") {
  Plan plan = Plan::parse_text(
      "forward:\n  - conv: {x: inputs.0, w: params.conv.weight, out: outputs.0, padding: 1, stride: 1}\n");
  auto io = [](const std::string& dt) {
    return IoSpec::from_json(ca::Json::parse(
        R"j({"inputs":[{"name":"x","shape":[2,3,8,8],"dtype":")j" + dt +
        R"j("}],"params":[{"name":"conv.weight","shape":[16,3,3,3],"dtype":")j" + dt +
        R"j("}],"outputs":[{"shape":[2,16,8,8],"dtype":")j" + dt + R"j("}]})j"));
  };
  for (const char* ok : {"F32", "F16", "BF16"}) {
    CAPTURE(ok);
    CHECK(bind_plan(plan, {}, io(ok)).forward.size() == 1);
  }
  for (const char* bad : {"F64", "I32"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(bind_plan(plan, {}, io(bad)), doctest::Contains("conv supports F32, F16, BF16 buffers"), PlanError);
  }
}

TEST_CASE("LaunchLimits::for_arch: the one parser of sm_NN / compute_NN (no std::regex)") {
  for (const char* ok : {"sm_70", "sm_90", "sm_90a", "compute_80", "sm_100", "sm_120a"}) {
    CAPTURE(ok);
    CHECK(LaunchLimits::for_arch(ok).arch == ok);
  }
  for (const char* bad : {"sm_9", "sm_9000", "sm_90ab", "sm_90A", "xx_90", "sm_", "sm90", "", "_90", "sm_9x0"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(LaunchLimits::for_arch(bad), ca::UsageError);
  }
  CHECK_THROWS_WITH_AS(LaunchLimits::for_arch("sm_61"), doctest::Contains("before sm_70"), ca::UsageError);
  CHECK(LaunchLimits::for_arch("sm_90").dynamic_shared > LaunchLimits::for_arch("sm_75").dynamic_shared);
}
