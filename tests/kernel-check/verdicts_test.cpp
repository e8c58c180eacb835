// Units of kernel-check's CPU stage and verdicts (tools/kernel-check/cpu_stage.*, verdicts.*): the
// candidate path's findings and refusals written into the check section, in the section's key order
// (the golden outputs hold it); the reference section. NVRTC compiles every bundle for real.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "libcommon/bundle/rules.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "tools/kernel-check/cpu_stage.hpp"
#include "tools/kernel-check/verdicts.hpp"

using namespace ca::kernel_check;

namespace {

// The worked bundle of SKILL.md and its task (datasets/skill/bundles/scale_add), from the tree under test.
std::string worked(const std::string& file) {
  const char* src = std::getenv("CA_SRC");
  REQUIRE_MESSAGE(src != nullptr, "CA_SRC names the source tree");
  return ca::read_file(std::string(src) + "/datasets/skill/bundles/scale_add/" + file);
}
std::string scale_add() { return worked("fused.cu"); }

ca::Json record(const std::string& kernel) {
  return ca::Json{{"task_id", "t"}, {"bundle", {{"kernels", {{"k.cu", kernel}}}, {"plan", worked("plan.yaml")}}}};
}

std::vector<std::string> keys(const ca::Json& check) {
  std::vector<std::string> out;
  for (auto& [k, v] : check.items())
    if (k != "compile_confinement") out.push_back(k);  // the host's (landlock or not)
  return out;
}

ca::bundle::CandidateOptions options(const ca::bundle::Rules& rules) {
  ca::bundle::CandidateOptions o;
  o.use_cache = false;
  o.rules = &rules;
  return o;
}

}  // namespace

TEST_CASE("verdicts: a refusal is written as the check section has always said it") {
  ca::Json check = ca::Json::object();
  ca::bundle::Refusal r{"policy_violation", "clock: k.cu:2: reads a clock", "", ca::bundle::Violation{"clock", "k.cu:2: reads a clock", "k.cu", 2}, ""};
  refuse(check, r);
  CHECK(keys(check) == std::vector<std::string>{"violation", "status", "reason", "correct"});
  CHECK(check["correct"] == false);
  CHECK(check["violation"]["line"] == 2);
  ca::Json plan = ca::Json::object();
  refuse(plan, ca::bundle::Refusal{"compile_error", "k.cu(3): error", "k", std::nullopt, "the log"});
  CHECK(keys(plan) == std::vector<std::string>{"status", "reason", "correct", "kernel", "log"});
  ca::Json none = ca::Json::object();
  set_verdict(none, "no_device", "no GPU");
  CHECK(none["correct"].is_null());
}

TEST_CASE("verdicts: the CPU stage's check section, compiled and bound, refused at each step") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  const ca::bundle::Rules rules = ca::bundle::Rules::load("");
  const ca::Json task = ca::parse_json(worked("task.json"), "task.json");
  Prepared p = cpu_stage(record(scale_add()), &task, options(rules));
  CHECK_FALSE(p.final);
  CHECK(keys(p.check) == std::vector<std::string>{"compiled", "correct", "arch", "compile_ms", "cached", "flags", "nvrtc",
                                                  "resources", "precision", "kernel_precision", "scratch_bytes", "scratch_cap"});
  CHECK(p.check["compiled"] == true);
  CHECK(p.check["precision"] == "fp32");
  CHECK(p.check["scratch_bytes"] == 0);
  CHECK(p.check["scratch_cap"] == ca::Json::parse(R"({"bytes": 67108864, "from": "io_ratio"})"));
  CHECK(p.candidate.binding.bound);
  // Without the task: compiled, nothing bound.
  Prepared q = cpu_stage(record(scale_add()), nullptr, options(rules));
  CHECK_FALSE(q.final);
  CHECK_FALSE(q.check.contains("scratch_bytes"));
  // A rule on the compiled code: the findings so far, then the violation and the verdict.
  Prepared v = cpu_stage(record(scale_add() + "__global__ void ca_own(float* x) { x[0] = 1; }\n"), &task, options(rules));
  CHECK(v.final);
  CHECK(keys(v.check) == std::vector<std::string>{"compiled", "correct", "arch", "compile_ms", "cached", "flags", "nvrtc",
                                                  "resources", "precision", "kernel_precision", "violation", "status", "reason"});
  CHECK(v.check["status"] == "policy_violation");
  CHECK(v.check["violation"]["rule"] == "reserved_name");
  CHECK(v.check["correct"] == false);
  // A compile error: the compile's fields, the verdict, the log.
  Prepared e = cpu_stage(record(scale_add() + "int broken(\n"), &task, options(rules));
  CHECK(e.final);
  CHECK(keys(e.check) == std::vector<std::string>{"compiled", "correct", "arch", "compile_ms", "cached", "flags", "nvrtc",
                                                  "status", "reason", "log"});
  CHECK(e.check["status"] == "compile_error");
  CHECK(e.check["compiled"] == false);
  // A record without its plan is a bad record (FieldError), not a verdict.
  ca::Json bad = record(scale_add());
  bad["bundle"].erase("plan");
  CHECK_THROWS_WITH_AS(cpu_stage(bad, &task, options(rules)), doctest::Contains("missing"), ca::FieldError);
}

TEST_CASE("verdicts: the reference section: the worker's measurement decides over the record's word") {
  ca::Json task = ca::Json::parse(R"({"task_id":"t","reference":{"mode":"train","stochastic":true}})");
  ca::Json from_record = reference_check(task, nullptr, false);
  CHECK(from_record["from"] == "task_record");
  CHECK(from_record["rule"] == "task_stochastic");
  ca::Json load = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":false})");
  ca::Json measured = reference_check(task, &load, false);
  CHECK(measured["stochastic"] == false);
  CHECK(measured["from"] == "worker");
  CHECK(measured["task_record_said"] == true);
  CHECK_FALSE(measured.contains("rule"));
  ca::Json bad = ca::Json::parse(R"({"task_id":"t","reference":{"mode":"sideways"}})");
  CHECK_THROWS_WITH_AS(reference_check(bad, nullptr, false), doctest::Contains("task.reference.mode"), ca::FieldError);
}
