// Units of the candidate path (libcommon/bundle/candidate.*): a record's bundle read with one wording
// per error, each step's refusal (and that the way stops at the first), the rules applied only when
// given, the binding to the task's tensors and the rules on it, the precision of launched kernels.
// NVRTC compiles every bundle for real (no cache: a cached cubin would hide a compile).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "libcommon/bundle/candidate.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"

using namespace ca::bundle;

namespace {

// The worked bundle of SKILL.md (datasets/skill/bundles/scale_add), read from the tree under test.
std::string worked(const std::string& file) {
  const char* src = std::getenv("CA_SRC");
  REQUIRE_MESSAGE(src != nullptr, "CA_SRC names the source tree");
  return ca::read_file(std::string(src) + "/datasets/skill/bundles/scale_add/" + file);
}
std::string scale_add() { return worked("fused.cu"); }

BundleSources sources(const std::string& kernel, const std::string& plan = worked("plan.yaml")) {
  return BundleSources{{{"k.cu", kernel}}, ca::Json(plan)};
}

IoSpec io_for(int64_t n) {
  const std::string s = std::to_string(n);
  return IoSpec::from_json(ca::Json::parse(R"({"inputs":[{"shape":[)" + s + R"(],"dtype":"F32"},{"shape":[)" + s +
                                           R"(],"dtype":"F32"}],"outputs":[{"shape":[)" + s + R"(],"dtype":"F32"}]})"));
}

CandidateOptions options(const Rules* rules) {
  CandidateOptions o;
  o.use_cache = false;
  o.rules = rules;
  return o;
}

std::string field_of(const ca::Json& record) {
  try {
    read_bundle(record);
  } catch (const ca::FieldError& e) {
    return e.field + ": " + e.reason;
  }
  return "";
}

}  // namespace

TEST_CASE("candidate: a record's bundle is read with one wording per error") {
  CHECK(field_of(ca::Json::parse(R"({"task_id":"t"})")) == "bundle: missing");
  CHECK(field_of(ca::Json::parse(R"({"bundle":[1]})")) == "bundle: expected an object with kernels and plan");
  CHECK(field_of(ca::Json::parse(R"({"bundle":{"plan":"x"}})")) == "bundle.kernels: missing");
  CHECK(field_of(ca::Json::parse(R"({"bundle":{"kernels":"x","plan":"x"}})")) == "bundle.kernels: expected an object {file: source}");
  CHECK(field_of(ca::Json::parse(R"({"bundle":{"kernels":{"a.cu":3},"plan":"x"}})")) == "bundle.kernels.a.cu: expected the source text");
  CHECK(field_of(ca::Json::parse(R"({"bundle":{"kernels":{"a.cu":"x"}}})")) == "bundle.plan: missing");
  CHECK(field_of(ca::Json::parse(R"({"bundle":{"kernels":{"a.cu":"x"},"plan":null}})")) == "bundle.plan: missing");
  const BundleSources s = read_bundle(ca::Json::parse(R"({"bundle":{"kernels":{"a.cu":"x"},"plan":"forward: []"}})"));
  CHECK(s.kernels.at("a.cu") == "x");
  CHECK(s.plan == "forward: []");
}

TEST_CASE("candidate: each step refuses in its own words, and the way stops there") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  const Rules rules = Rules::load("");
  // The plan does not parse: nothing compiled.
  Candidate c = prepare_candidate(sources(scale_add(), "forward: [{launch: }"), nullptr, options(&rules));
  REQUIRE(c.refused);
  CHECK(c.refused->status == "plan_error");
  CHECK_FALSE(c.compiled);
  // No sources for a launched kernel.
  c = prepare_candidate(BundleSources{{}, ca::Json(worked("plan.yaml"))}, nullptr, options(&rules));
  REQUIRE(c.refused);
  CHECK(c.refused->reason == "the plan launches scale_add but the bundle has no kernel sources");
  // A rule on the sources: the violation, and the reason starting with its rule.
  c = prepare_candidate(sources(scale_add() + "__global__ void t(long long* x) { x[0] = clock64(); }\n"), nullptr,
                        options(&rules));
  REQUIRE(c.refused);
  CHECK(c.refused->status == "policy_violation");
  REQUIRE(c.refused->violation);
  CHECK(c.refused->violation->rule == "clock");
  const std::string source = scale_add();
  const std::string line = std::to_string(std::count(source.begin(), source.end(), '\n') + 1);
  CHECK(c.refused->reason.rfind("clock: k.cu:" + line + ": ", 0) == 0);
  CHECK_FALSE(c.compiled);
  // A launched kernel the sources never define: a plan error naming it and its step.
  c = prepare_candidate(sources("__global__ void other() {}\n"), nullptr, options(&rules));
  REQUIRE(c.refused);
  CHECK(c.refused->status == "plan_error");
  CHECK(c.refused->kernel == "scale_add");
  CHECK(c.refused->reason.find("kernel 'scale_add' is not defined in the bundle's sources") != std::string::npos);
  CHECK_FALSE(c.compiled);
  // Code that does not compile: the compiler's first error and its log.
  c = prepare_candidate(sources(scale_add() + "int broken(\n"), nullptr, options(&rules));
  REQUIRE(c.refused);
  CHECK(c.refused->status == "compile_error");
  CHECK_FALSE(c.refused->log.empty());
  REQUIRE(c.compiled);
  CHECK_FALSE(c.compiled->ok);
  // A rule on the compiled code (a kernel in the checker's namespace), after a compile that succeeded.
  c = prepare_candidate(sources(scale_add() + "__global__ void ca_own(float* x) { x[0] = 1; }\n"), nullptr,
                        options(&rules));
  REQUIRE(c.refused);
  CHECK(c.refused->status == "policy_violation");
  CHECK(c.refused->violation->rule == "reserved_name");
  CHECK(c.compiled_ok());
  // The plan against the signature: a kernel taking other arguments.
  c = prepare_candidate(sources("__global__ void scale_add(float* out) { out[0] = 1; }\n"), nullptr, options(&rules));
  REQUIRE(c.refused);
  CHECK(c.refused->status == "plan_error");
  CHECK(c.compiled_ok());
}

TEST_CASE("candidate: rules apply only when given (a caller that trusts a verdict gives none)") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  const std::string timed = scale_add() + "__global__ void t(long long* x) { x[0] = clock64(); }\n";
  Candidate trusted = prepare_candidate(sources(timed), nullptr, options(nullptr));
  CHECK_FALSE(trusted.refused);
  CHECK(trusted.compiled_ok());
  // Every other step still runs without rules: the undefined kernel is refused all the same.
  Candidate undefined = prepare_candidate(sources("__global__ void other() {}\n"), nullptr, options(nullptr));
  REQUIRE(undefined.refused);
  CHECK(undefined.refused->status == "plan_error");
}

TEST_CASE("candidate: bound to the task's tensors, the rules on the bound plan, the precision") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  const Rules rules = Rules::load("");
  const IoSpec io = io_for(1000);
  Candidate c = prepare_candidate(sources(scale_add()), &io, options(&rules));
  REQUIRE_FALSE(c.refused);
  REQUIRE(c.binding.bound);
  CHECK(c.binding.bound->forward.size() == 1);
  CHECK(c.binding.scratch_bytes == 0);
  CHECK(c.precision(&*c.binding.bound) == "fp32");
  CHECK(c.kernel_precisions() == std::map<std::string, std::string>{{"scale_add", "fp32"}});
  // Without shapes, nothing is bound; a later binding (a GPU's worker's tensors) is the same function.
  Candidate unbound = prepare_candidate(sources(scale_add()), nullptr, options(&rules));
  REQUIRE_FALSE(unbound.refused);
  CHECK_FALSE(unbound.binding.bound);
  Binding b = bind_candidate(unbound, io_for(4096), LaunchLimits::for_arch("sm_90"), &rules);
  REQUIRE(b.bound);
  CHECK_FALSE(b.refused);
  CHECK(b.bound->forward[0].launch.grid[0] == 16);
  // Compiled elsewhere (the runner child's case): the plan and signatures read again bind the same.
  const Candidate again = compiled_candidate(unbound.sources.plan, *unbound.compiled);
  Binding b2 = bind_candidate(again, io_for(4096), LaunchLimits::for_arch("sm_90"), nullptr);
  REQUIRE(b2.bound);
  CHECK(b2.bound->forward[0].launch.grid[0] == 16);
  CHECK(b2.bound->forward[0].launch.mangled == b.bound->forward[0].launch.mangled);
  CHECK_THROWS_AS(compiled_candidate(ca::Json("forward: [{launch: }"), *unbound.compiled), PlanError);
  // The rules on the bound plan: a scratch cap no plan meets here.
  const Rules tight = Rules::parse("max_scratch_ratio: 0\nmax_scratch_slack_bytes: 0\nmax_forward_steps: 0\n", "tight.yaml");
  Binding refused = bind_candidate(unbound, io_for(4096), LaunchLimits::for_arch("sm_90"), &tight);
  REQUIRE(refused.refused);
  CHECK(refused.bound);  // bound, then refused by the rules
  CHECK(refused.refused->status == "policy_violation");
  CHECK(refused.refused->violation->rule == "max_forward_steps");
  CHECK_FALSE(bind_candidate(unbound, io_for(4096), LaunchLimits::for_arch("sm_90"), nullptr).refused);
  // A binder's refusal is a plan error: an output of another dtype than the kernel writes.
  IoSpec wrong = IoSpec::from_json(ca::Json::parse(
      R"({"inputs":[{"shape":[8],"dtype":"F32"},{"shape":[8],"dtype":"F32"}],"outputs":[{"shape":[8],"dtype":"I64"}]})"));
  Binding mismatch = bind_candidate(unbound, wrong, LaunchLimits::for_arch("sm_90"), &rules);
  REQUIRE(mismatch.refused);
  CHECK(mismatch.refused->status == "plan_error");
  CHECK_FALSE(mismatch.bound);
  // Scratch sizes that add up past 2^63: bound, then refused as a plan error (never an exception).
  Candidate wide = prepare_candidate(
      sources(scale_add(), std::string("scratch:\n  a: {dtype: uint8, shape: [4611686018427387904]}\n"
                                     "  b: {dtype: uint8, shape: [4611686018427387904]}\n") + worked("plan.yaml")),
      &io, options(&rules));
  REQUIRE(wide.refused);
  CHECK(wide.refused->status == "plan_error");
  CHECK(wide.refused->reason.find("add up past 2^63") != std::string::npos);
  CHECK(wide.binding.bound);
  CHECK_FALSE(wide.binding.scratch_bytes);
}
