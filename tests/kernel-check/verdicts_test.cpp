// Units of kernel-check's CPU stage and verdicts (tools/kernel-check/cpu_stage.*, verdicts.*): the
// candidate path's findings and refusals written into the check section, in the section's key order
// (the golden outputs hold it); the reference section. NVRTC compiles every bundle for real.
#include <doctest/doctest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "libcommon/bundle/rules.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "tools/kernel-check/cpu_stage.hpp"
#include "tools/kernel-check/runner.hpp"
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
  CHECK(measured["task_record_said"] == ca::Json{{"stochastic", true}});
  CHECK_FALSE(measured.contains("rule"));
  CHECK_FALSE(task_verdict(measured, false));
  ca::Json bad = ca::Json::parse(R"({"task_id":"t","reference":{"mode":"sideways"}})");
  CHECK_THROWS_WITH_AS(reference_check(bad, nullptr, false), doctest::Contains("task.reference.mode"), ca::FieldError);
}

TEST_CASE("verdicts: insensitive and ill-conditioned references: the worker's load decides, a record's claim never") {
  // A record claiming every flag for a task its worker measured as usable: judged, the claims kept aside.
  ca::Json claims = ca::Json::parse(
      R"({"task_id":"t","reference":{"mode":"train","stochastic":true,"insensitive":true,"ill_conditioned":true}})");
  ca::Json usable = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":false,"insensitive":false,
      "insensitive_evidence":{"checks":[{"against":"seed 1","rel_l2":1.2,"within":false}]},
      "ill_conditioned":false,"ill_conditioned_evidence":{"cap_rel_l2":0.05,"fp32_err_rel_l2":1e-7}})");
  ca::Json r = reference_check(claims, &usable, false);
  CHECK(r["insensitive"] == false);
  CHECK(r["ill_conditioned"] == false);
  CHECK(r["task_record_said"] == ca::Json::parse(R"({"stochastic":true,"insensitive":true,"ill_conditioned":true})"));
  CHECK(r["insensitive_evidence"]["checks"][0]["rel_l2"] == 1.2);
  CHECK_FALSE(task_verdict(r, false));
  CHECK_FALSE(task_verdict(r, true));
  // The CPU path shows the record's flags (from: task_record) and decides nothing with them.
  ca::Json shown = reference_check(claims, nullptr, false);
  CHECK(shown["insensitive"] == true);
  CHECK(shown["ill_conditioned"] == true);
  CHECK(shown["from"] == "task_record");
  CHECK_FALSE(task_verdict(shown, false));
  // A record without the flags reads as before (no new keys on the CPU path).
  ca::Json plain = ca::Json::parse(R"({"task_id":"t"})");
  CHECK(reference_check(plain, nullptr, false) == ca::Json::parse(R"({"mode":"train","stochastic":null,"from":null})"));

  // The worker measured an insensitive reference: task_insensitive, with the evidence in the reason,
  // whatever the record says (here: nothing, and then a claim of sensitive).
  ca::Json insensitive = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":false,"insensitive":true,
      "insensitive_evidence":{"checks":[{"against":"seed 1","rel_l2":5.9e-8,"within":true},
                                        {"against":"variant shift_scale","rel_l2":3.7e-8,"within":true}]},
      "ill_conditioned":false})");
  for (const ca::Json& t : {plain, ca::Json::parse(R"({"task_id":"t","reference":{"insensitive":false}})")}) {
    ca::Json ri = reference_check(t, &insensitive, false);
    auto v = task_verdict(ri, false);
    REQUIRE(v);
    CHECK(v->status == "task_insensitive");
    CHECK(v->reason.find("variant shift_scale: relative L2 3.7e-08") != std::string::npos);
  }
  // Insensitive on its own draws only (a variant moves it: a kernel that tells the variant apart
  // computes only then): task_insensitive naming the spread and the calibrated bound.
  ca::Json own = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":false,"insensitive":true,
      "insensitive_evidence":{"checks":[{"against":"seed 1","rel_l2":0.0,"within":true},
                                        {"against":"variant shift_scale","rel_l2":0.8,"within":false}],
                              "own_draws":{"rel_l2":0.0,"calibrated_bound_rel_l2":3.01e-05}},
      "ill_conditioned":false})");
  // The verdict a worker's load answer gives a task record without flags, and words its reason holds.
  auto verdict = [&](const ca::Json& load, const std::string& status, std::initializer_list<std::string> words) {
    auto v = task_verdict(reference_check(plain, &load, false), false);
    REQUIRE(v);
    CHECK(v->status == status);
    for (const auto& w : words) CHECK_MESSAGE(v->reason.find(w) != std::string::npos, v->reason);
  };
  verdict(own, "task_insensitive", {"on its own draws", "3.01e-05"});
  // Ill-conditioned: task_ill_conditioned naming the measured error and the cap.
  ca::Json ill = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":false,"insensitive":false,"ill_conditioned":true,
      "ill_conditioned_evidence":{"cap_rel_l2":0.05,"fp32_err_rel_l2":0.79}})");
  verdict(ill, "task_ill_conditioned", {"0.79"});
  // No float64 run at load (an op without a float64 kernel, the copy out of memory): task_uncalibrated
  // under the calibrated bound, naming the error; judged by the published or strict bound, which need
  // no calibration.
  ca::Json uncal = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":false,"insensitive":false,"ill_conditioned":null,
      "ill_conditioned_evidence":{"cap_rel_l2":0.05,"error":"calibrate: RuntimeError: expected m1 and m2 to have the same dtype"}})");
  verdict(uncal, "task_uncalibrated", {"expected m1 and m2 to have the same dtype"});
  CHECK_FALSE(task_verdict(reference_check(plain, &uncal, false), false, /*calibrated=*/false));
  // ... unless the float64 copy ran out of memory (the worker's out_of_memory, never the error's
  // wording): the node's limit (node_error, judged again by --resume).
  ca::Json oom = uncal;
  oom["ill_conditioned_evidence"]["error"] = "calibrate: OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB";
  verdict(oom, "task_uncalibrated", {"Tried to allocate 16.00 GiB"});
  oom["ill_conditioned_evidence"]["out_of_memory"] = true;
  verdict(oom, "node_error", {"Tried to allocate 16.00 GiB"});
  // Stochastic first; --allow-stochastic judges a stochastic task unless it is also unusable otherwise.
  ca::Json stoch = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":true,"insensitive":false,"ill_conditioned":null,
      "ill_conditioned_evidence":{"cap_rel_l2":0.05,"error":"the reference is stochastic (another RNG state gives other outputs): no float64 run"}})");
  CHECK(task_verdict(reference_check(plain, &stoch, false), false)->status == "task_stochastic");
  CHECK_FALSE(task_verdict(reference_check(plain, &stoch, true), true));  // no float64 run by design: judged
  // null (not measured: no float64 run, an older worker): judged.
  ca::Json unknown = ca::Json::parse(R"({"ok":true,"mode":"train","stochastic":false})");
  ca::Json ru = reference_check(claims, &unknown, false);
  CHECK(ru["insensitive"].is_null());
  CHECK_FALSE(task_verdict(ru, false));
  // set_verdict: nothing judged, correct null.
  for (const char* status :
       {"task_stochastic", "task_insensitive", "task_ill_conditioned", "task_uncalibrated", "reference_error", "node_error"}) {
    ca::Json check = ca::Json::object();
    set_verdict(check, status, "why");
    CHECK(check["correct"].is_null());
  }
}

TEST_CASE("verdicts: out of memory at load is the node's only before the candidate's code runs") {
  // The judge's own allocations (the plan's buffers within the scratch cap, the module, the libraries'
  // plans): the node could not serve them, no verdict. Once init's launches run, the memory is the
  // candidate's demand (a launch holds its kernel's local memory for every thread the GPU can run): a
  // wrong kernel that asked for more than the GPU has earned no verdict instead of its -1.
  CHECK(ca::kernel_check::load_failure_error(false, CUDA_ERROR_OUT_OF_MEMORY) == "out_of_memory");
  CHECK(ca::kernel_check::load_failure_error(true, CUDA_ERROR_OUT_OF_MEMORY) == "runtime_error");
  CHECK(ca::kernel_check::load_failure_error(false, CUDA_ERROR_INVALID_VALUE) == "runtime_error");
  CHECK(ca::kernel_check::load_failure_error(true, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) == "runtime_error");
}
