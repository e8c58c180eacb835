// Units of the bundle rules (libcommon/bundle/rules.*, applied on the candidate path): comment
// stripping, the shipped default, unknown keys; and the rules on compiled code (heap, reserved names,
// module memory), each with NVRTC compiling the hostile spelling for real.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "libcommon/errors.hpp"
#include "libcommon/bundle/compile.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/bundle/rules.hpp"

TEST_CASE("rules: comments stripped, lines kept; the default parses") {
  std::string s = "a // clock64()\n/* printf(\n */ b \"// kept\"";
  std::string t = ca::bundle::strip_comments(s);
  CHECK(t.find("clock64") == std::string::npos);
  CHECK(t.find("printf") == std::string::npos);
  CHECK(std::count(t.begin(), t.end(), '\n') == 2);
  CHECK(t.find("\"// kept\"") != std::string::npos);
  ca::bundle::Rules p = ca::bundle::Rules::load("");
  CHECK(p.max_module_global_bytes == 65536);
  CHECK(p.forbidden.size() == 9);
  auto v = p.check_sources({{"k.cu", "__global__ void k() {\n  long t = clock64();\n}\n"}});
  REQUIRE(v);
  CHECK(v->rule == "clock");
  CHECK(v->line == 2);
  CHECK_FALSE(p.check_sources({{"k.cu", "#include <cuda_fp16.h>\n#include \"k.cuh\"\n"}, {"k.cuh", ""}}));
  CHECK_THROWS_AS(ca::bundle::Rules::parse("bogus_key: 1\n", "x.yaml"), ca::UsageError);
  // The identity a verdict or a timing records: the default's text, and the file's when one was given.
  CHECK(p.identity()["file"] == "");
  CHECK(p.identity()["default"] == ca::bundle::Rules::default_text());
  const ca::bundle::Rules f = ca::bundle::Rules::parse("max_stack_bytes: 4096\n", "x.yaml");
  CHECK(f.identity()["file"] == "max_stack_bytes: 4096\n");
  CHECK(f.identity() != p.identity());
}

TEST_CASE("rules: patterns run over bytes, in linear time, on text of any length") {
  // A byte that is not UTF-8 is a character like any other: it cannot split a rule's match.
  ca::bundle::Rules p = ca::bundle::Rules::parse("forbidden:\n  - rule: span\n    source: 'foo[^;]*bar'\n", "x.yaml");
  auto v = p.check_sources({{"k.cu", "int a;\nfoo \xff\xfe bar\n"}});
  REQUIRE(v);
  CHECK(v->rule == "span");
  CHECK(v->line == 2);
  // A 4 MiB run between a construct and its parenthesis: found, without the recursion that
  // overflowed the stack under std::regex.
  ca::bundle::Rules d = ca::bundle::Rules::load("");
  auto c = d.check_sources({{"k.cu", "long t = clock64" + std::string(4 << 20, ' ') + "();\n"}});
  REQUIRE(c);
  CHECK(c->rule == "clock");
  // RE2 syntax: a pattern RE2 cannot compile (a backreference) is a usage error naming the rule.
  CHECK_THROWS_WITH_AS(ca::bundle::Rules::parse("forbidden:\n  - rule: back\n    source: '(a)\\1'\n", "x.yaml"),
                       doctest::Contains("rule back: bad regular expression (RE2 syntax)"), ca::UsageError);
}

// The compiled code decides, not the source's spelling: each is compiled by NVRTC for real and
// given to check_compiled alone (the source patterns are not asked).
static ca::bundle::CompileResult compiled(const std::string& src, const std::vector<std::string>& names) {
  ca::bundle::CompileOptions opt;
  opt.use_cache = false;
  auto r = ca::bundle::compile_bundle({{"k.cu", src}}, names, opt);
  REQUIRE_MESSAGE(r.ok, r.log);
  return r;
}

TEST_CASE("rules: the device heap is refused from what the compiled code calls, in every spelling") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  ca::bundle::Rules p = ca::bundle::Rules::load("");
  const std::vector<std::pair<std::string, std::string>> spellings = {
      {"plain malloc", "float* p = (float*)malloc(16); x[0] = p[0];"},
      {"token pasting", "#define CAT(a, b) a##b\n  float* p = (float*)CAT(mal, loc)(16); x[0] = p[0];"},
      {"::operator new", "void* p = ::operator new(64); x[0] = *(float*)p;"},
      {"::operator delete", "::operator delete((void*)x);"},
      {"(free)(p)", "(free)(x);"},
      {"new[] / delete[]", "float* p = new float[4]; p[0] = 1; x[0] = p[1]; delete[] p;"},
      {"__nv_aligned_device_malloc", "float* p = (float*)__nv_aligned_device_malloc(64, 16); x[0] = p[0];"},
      {"a pointer to malloc", "void* (*f)(size_t) = malloc; float* p = (float*)f(64); x[0] = p[0];"},
  };
  for (const auto& [what, body] : spellings) {
    auto r = compiled("__global__ void k(float* x) {\n  " + body + "\n}\n", {"k"});
    auto v = p.check_compiled(r);
    REQUIRE_MESSAGE(v, what);
    CHECK_MESSAGE(v->rule == "device_malloc", what);
    CHECK_MESSAGE(v->reason.find("the device heap") != std::string::npos, what << ": " << v->reason);
    CHECK_MESSAGE(v->reason.find("found in the compiled code") != std::string::npos, what);
  }
  // The place, from -lineinfo: the bundle's file and the line of the call.
  auto r = compiled("__global__ void k(float* x) {\n  x[1] = 2;\n  (free)(x);\n}\n", {"k"});
  auto v = p.check_compiled(r);
  REQUIRE(v);
  CHECK(v->file == "k.cu");
  CHECK(v->line == 3);
  // The undefined symbols of the cubin say the same.
  auto undefined = ca::bundle::cubin_undefined_functions(r.cubin);
  CHECK(undefined.count("free") == 1);
  // printf (vprintf) and assert (__assertfail) are the externs allowed here (printf has its own rule).
  auto fine = compiled("__global__ void k(float* x) {\n  assert(x != nullptr);\n  x[0] = 1;\n}\n", {"k"});
  CHECK_FALSE(p.check_compiled(fine));
  auto printed = compiled("__global__ void k(float* x) {\n  printf(\"%f\", x[0]);\n}\n", {"k"});
  auto pv = p.check_compiled(printed);
  REQUIRE(pv);
  CHECK(pv->rule == "printf");
}

TEST_CASE("rules: a kernel named in the checker's namespace is refused") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  ca::bundle::Rules p = ca::bundle::Rules::load("");
  // The timing exploit: an extern "C" kernel named like the checker's shared-memory scrub.
  auto r = compiled("extern \"C\" __global__ void ca_scrub_shared(float* x) { x[threadIdx.x] = 1; }\n", {"ca_scrub_shared"});
  auto v = p.check_compiled(r);
  REQUIRE(v);
  CHECK(v->rule == "reserved_name");
  CHECK(v->reason.find("ca_scrub_shared") != std::string::npos);
  // Mangled, in a namespace, or never launched: the same.
  for (std::string src : {"__global__ void ca_fingerprint(float* x) { x[0] = 1; }\n__global__ void k(float* x) { x[0] = 2; }\n",
                          "namespace ns { __global__ void ca_compare(float* x) { x[0] = 1; } }\n__global__ void k(float* x) { x[0] = 2; }\n",
                          "extern \"C\" __global__ void ca_read_flush() {}\n__global__ void k(float* x) { x[0] = 2; }\n"}) {
    auto rv = p.check_compiled(compiled(src, {"k"}));
    REQUIRE_MESSAGE(rv, src);
    CHECK_MESSAGE(rv->rule == "reserved_name", src);
  }
  // A name that only contains the prefix is the bundle's own.
  CHECK_FALSE(p.check_compiled(compiled("__global__ void scale_ca_x(float* x) { x[0] = 1; }\nstruct ca_t { float v; };\n"
                                        "__global__ void k(ca_t* x) { x[0].v = 1; }\n",
                                        {"scale_ca_x", "k"})));
  CHECK(ca::bundle::reserved_kernel_name("ca_scrub_shared"));
  CHECK(ca::bundle::reserved_kernel_name("_Z15ca_scrub_sharedj"));
  CHECK(ca::bundle::reserved_kernel_name("_ZN2ns10ca_compareEPf"));
  CHECK_FALSE(ca::bundle::reserved_kernel_name("_Z1kP4ca_t"));
  CHECK_FALSE(ca::bundle::reserved_kernel_name("scale_ca_x"));
  // Every way a mangled name qualifies it (the demangler reads them): namespace std (St, which a
  // scan of <length><identifier> pairs missed), std's nested, an anonymous namespace, a template
  // with its return type, a ca_ namespace; a template argument or parameter type is not the name.
  CHECK(ca::bundle::reserved_kernel_name("_ZSt8ca_probePKfPfi"));
  CHECK(ca::bundle::reserved_kernel_name("_ZNSt5inner8ca_probeEv"));
  CHECK(ca::bundle::reserved_kernel_name("_ZN12_GLOBAL__N_18ca_probeEPKfPfi"));
  CHECK(ca::bundle::reserved_kernel_name("_ZN1a1b8ca_probeILi2EEEvPKfPfi"));
  CHECK(ca::bundle::reserved_kernel_name("_ZN4ca_x4workEv"));
  CHECK_FALSE(ca::bundle::reserved_kernel_name("_Z4workI4ca_tEvPT_"));
  CHECK_FALSE(ca::bundle::reserved_kernel_name("_ZN2ns4workEP4ca_t"));
}

TEST_CASE("rules: __constant__ memory counts toward the module cap") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  ca::bundle::Rules p = ca::bundle::Rules::load("");
  // 64 KiB of constants and 64 bytes of globals: past the 65,536-byte cap.
  auto big = compiled("__constant__ float c_big[16384];\n__device__ float g_small[16];\n"
                      "__global__ void k(float* x) { g_small[threadIdx.x & 15] = c_big[threadIdx.x]; x[0] = g_small[0]; }\n",
                      {"k"});
  CHECK(big.module_constant_bytes >= 65536);
  auto v = p.check_compiled(big);
  REQUIRE(v);
  CHECK(v->rule == "max_module_global_bytes");
  CHECK(v->reason.find("__constant__") != std::string::npos);
  // A lookup table in __constant__ stays legal; the executor restores it before every call.
  auto lut = compiled("__constant__ float c_lut[256] = {1, 2, 3};\n"
                      "__global__ void k(float* x) { x[threadIdx.x] *= c_lut[threadIdx.x & 255]; }\n",
                      {"k"});
  CHECK_FALSE(p.check_compiled(lut));
  CHECK(ca::bundle::cubin_writable_globals(lut.cubin).at("c_lut") == 1024);
  // Written through its generic address (the cache exploit): a restored symbol all the same.
  auto written = compiled("__constant__ float c_cache[1024];\n"
                          "__device__ __noinline__ float* generic(const float* p) { return const_cast<float*>(p); }\n"
                          "__global__ void k(float* x) { generic(c_cache)[threadIdx.x] = x[threadIdx.x]; }\n",
                          {"k"});
  CHECK(ca::bundle::cubin_writable_globals(written.cubin).at("c_cache") == 4096);
}

TEST_CASE("rules: PTX patterns also see an instruction split over lines") {
  // A rule over the PTX text matches the instruction as ptxas reads it: the line breaks inline asm
  // puts between an opcode and its modifiers, or between call and its target, cannot split it.
  ca::bundle::Rules p = ca::bundle::Rules::parse("forbidden:\n  - rule: no_f16x2\n    ptx: 'fma\\.rn\\.f16x2'\n", "x.yaml");
  auto r = compiled("__global__ void k(unsigned* x) {\n  unsigned d;\n"
                    "  asm volatile(\"fma\\n.rn\\n.f16x2 %0, %1, %1, %1;\" : \"=r\"(d) : \"r\"(x[0]));\n  x[1] = d;\n}\n",
                    {"k"});
  auto v = p.check_compiled(r);
  REQUIRE(v);
  CHECK(v->rule == "no_f16x2");
}

TEST_CASE("rules: per-thread local memory is read from the cubin, callees and damage included") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  ca::bundle::Rules p = ca::bundle::Rules::load("");
  CHECK(p.max_stack_bytes == 8192);
  // A 512 KiB frame in a callee ptxas's log lists after the kernel with 0 bytes of its own.
  auto hidden = compiled("__device__ __noinline__ float deep(int k) {\n  volatile float buf[131072];\n"
                         "  for (int j = 0; j < 131072; j += 1024) buf[j] = j + k;\n  return buf[(k * 977) % 131072];\n}\n"
                         "__global__ void hog(float* s, int k) { s[threadIdx.x] = deep(k); }\n",
                         {"hog"});
  REQUIRE(hidden.local_bytes);
  CHECK(hidden.local_bytes->at("_Z3hogPfi") >= 524288);
  CHECK(hidden.resources.at("_Z3hogPfi").stack_bytes >= 524288);  // the report says so too
  auto v = p.check_compiled(hidden);
  REQUIRE(v);
  CHECK(v->rule == "max_stack_bytes");
  CHECK(v->reason.find("hog(float*, int)") != std::string::npos);
  // A small per-thread array is legal; a rules file may lift the cap.
  auto small = compiled("__global__ void k(float* s, int i) { volatile float b[64]; b[i & 63] = i; s[threadIdx.x] = b[(i * 7) & 63]; }\n",
                        {"k"});
  REQUIRE(small.local_bytes);
  CHECK(small.local_bytes->at("_Z1kPfi") == 256);
  CHECK_FALSE(p.check_compiled(small));
  CHECK_FALSE(ca::bundle::Rules::parse("max_stack_bytes: 1048576\n", "lift.yaml").check_compiled(hidden));
  // A .nv.info that does not read as attributes (a format byte no cubin uses): unknown, refused.
  std::string damaged = hidden.cubin;
  const auto sections = ca::bundle::cubin_sections(damaged);
  REQUIRE(sections.count(".nv.info"));
  bool found = false;
  for (size_t at = damaged.find(std::string("\x04\x2f\x08\x00", 4)); at != std::string::npos && !found;) {
    damaged[at] = '\x07';  // the first REGCOUNT attribute's format
    found = true;
  }
  REQUIRE(found);
  CHECK_FALSE(ca::bundle::cubin_local_bytes(damaged));
  ca::bundle::CompileResult broken = hidden;
  broken.local_bytes.reset();
  auto u = p.check_compiled(broken);
  REQUIRE(u);
  CHECK(u->rule == "max_stack_bytes");
}
