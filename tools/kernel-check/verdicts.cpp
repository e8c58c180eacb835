// The check section's verdicts and findings (verdicts.hpp).
#include "tools/kernel-check/verdicts.hpp"

#include <cmath>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/worker/requests.hpp"

namespace ca::kernel_check {

void set_verdict(ca::Json& check, const std::string& status, const std::string& reason) {
  check["status"] = status;
  check["reason"] = reason;
  if (status == "passed") check["correct"] = true;
  // Nothing judged: no GPU, a task whose reference no verdict can use (task_verdict), a reference
  // the worker could not compute (reference_error: the task's or the node's failure, never the
  // candidate's; no -1 for it), or a node that failed the candidate's run (node_error: no room for
  // its buffers within the scratch cap, a runner killed from outside).
  else if (status == "no_device" || status == "task_stochastic" || status == "task_insensitive" ||
           status == "task_ill_conditioned" || status == "task_uncalibrated" || status == "reference_error" ||
           status == "node_error")
    check["correct"] = nullptr;
  else check["correct"] = false;
}

void refuse(ca::Json& check, const ca::bundle::Refusal& refusal) {
  if (refusal.violation) check["violation"] = refusal.violation->to_json();
  set_verdict(check, refusal.status, refusal.reason);
  if (!refusal.kernel.empty()) check["kernel"] = refusal.kernel;
  if (!refusal.log.empty()) check["log"] = refusal.log;
}

void candidate_fields(ca::Json& check, const ca::bundle::Candidate& c) {
  if (!c.compiled) return;
  const ca::bundle::CompileResult& r = *c.compiled;
  check["compile_ms"] = std::round(r.compile_ms * 1000) / 1000;
  check["cached"] = r.cached;
  check["flags"] = r.flags;
  check["nvrtc"] = r.nvrtc_version;
  if (!r.confinement.empty()) check["compile_confinement"] = r.confinement;
  if (!r.ok) return;
  check["compiled"] = true;
  if (auto warnings = ca::bundle::compile_warnings(r.log); !warnings.empty()) check["compile_warnings"] = warnings;
  check["resources"] = r.resources_json();
  check["precision"] = c.precision(nullptr);
  if (auto per_kernel = c.kernel_precisions(); !per_kernel.empty()) check["kernel_precision"] = per_kernel;
  binding_fields(check, c, c.binding);
}

void binding_fields(ca::Json& check, const ca::bundle::Candidate& c, const ca::bundle::Binding& binding) {
  if (!binding.bound) return;
  check["precision"] = c.precision(&*binding.bound);
  if (binding.scratch_bytes) check["scratch_bytes"] = *binding.scratch_bytes;
  if (binding.scratch_cap) check["scratch_cap"] = binding.scratch_cap->to_json();
  // Inputs and params no step names: a note, not a verdict (a task may hold params its forward never
  // uses), but a plan one layer short of the task's binds and then fails every call; this says which.
  for (const auto& [space, key] : {std::pair{ca::bundle::Space::input, "inputs_unread"}, {ca::bundle::Space::param, "params_unread"}}) {
    const auto unread = binding.bound->unread(space);
    if (unread.empty()) continue;
    int64_t total = 0;
    for (const auto& b : binding.bound->buffers) total += b.space == space;
    ca::Json names = ca::Json::array();
    for (size_t i = 0; i < unread.size() && i < 8; ++i) names.push_back(unread[i]);
    check[key] = {{"count", unread.size()}, {"of", total}, {"first", names}};
  }
}

namespace {

// A flag the task record states: its reference section's, else (stochastic) the older top-level one.
ca::Json record_flag(const ca::Json& task, const char* key) {
  if (task.contains("reference") && task["reference"].is_object() && task["reference"].contains(key) &&
      task["reference"][key].is_boolean())
    return task["reference"][key];
  if (std::string(key) == "stochastic" && task.contains("stochastic") && task["stochastic"].is_boolean())
    return task["stochastic"];
  return nullptr;
}

std::string num(const ca::Json& v) {
  if (!v.is_number()) return "inf";
  std::ostringstream s;
  s.precision(3);
  s << v.get<double>();
  return s.str();
}

}  // namespace

ca::Json reference_check(const ca::Json& task, const ca::Json* load, bool allow_stochastic) {
  std::string mode;
  try {
    mode = ca::worker::request::task_mode(task);
  } catch (const ca::FieldError& e) {
    throw ca::FieldError("task." + e.field, e.reason);
  }
  // What the task record says: its reference section, else the top-level flag of older records.
  const ca::Json said = record_flag(task, "stochastic");
  ca::Json r{{"mode", mode}, {"stochastic", said}, {"from", said.is_null() ? ca::Json(nullptr) : ca::Json("task_record")}};
  static const char* const kUnusable[] = {"insensitive", "ill_conditioned"};
  if (!load) {
    // The CPU path judges nothing: a record's flags are shown where it states them (absent otherwise,
    // so a record without them reads as before).
    for (const char* key : kUnusable) {
      const ca::Json f = record_flag(task, key);
      if (f.is_null()) continue;
      r[key] = f;
      r["from"] = "task_record";
    }
  } else {
    if (load->contains("mode") && (*load)["mode"].is_string()) r["mode"] = (*load)["mode"];  // what ran
    // The judge's own measurement decides, never the record's word: a record is client input, and a
    // claim of stochastic (insensitive, ill_conditioned) would turn a wrong kernel's verdict into no
    // verdict (no penalty). A record that disagrees is kept beside it for the reader.
    ca::Json record_said = ca::Json::object();
    const bool measured = load->value("stochastic", false);
    r["stochastic"] = measured;
    r["from"] = "worker";
    if (!said.is_null() && said != measured) record_said["stochastic"] = said;
    for (const char* key : kUnusable) {
      // null: the worker could not measure it (no float64 run; an older worker says nothing): judged.
      const ca::Json m = load->contains(key) && (*load)[key].is_boolean() ? (*load)[key] : ca::Json(nullptr);
      r[key] = m;
      const std::string ev = std::string(key) + "_evidence";
      if (load->contains(ev) && (*load)[ev].is_object()) r[ev] = (*load)[ev];
      const ca::Json f = record_flag(task, key);
      if (!f.is_null() && f != m) record_said[key] = f;
    }
    if (!record_said.empty()) r["task_record_said"] = record_said;
  }
  if (r["stochastic"] == true) r["rule"] = allow_stochastic ? "allow_stochastic" : "task_stochastic";
  return r;
}

std::optional<TaskVerdict> task_verdict(const ca::Json& reference, bool allow_stochastic, bool calibrated) {
  if (!reference.is_object() || reference.value("from", ca::Json()) != "worker") return std::nullopt;
  if (reference.value("stochastic", false) == true && !allow_stochastic)
    return TaskVerdict{"task_stochastic",
                       "the task's reference is stochastic (two RNG states give two outputs on the same inputs: a live "
                       "dropout or random op in forward, as KernelBench runs models in training mode): no candidate can be "
                       "judged against one random draw (--allow-stochastic judges it anyway)"};
  if (reference.value("insensitive", ca::Json()) == true) {
    std::string against;
    const ca::Json ev = reference.value("insensitive_evidence", ca::Json::object());
    if (ev.contains("checks") && ev["checks"].is_array())
      for (const auto& c : ev["checks"])
        if (c.is_object())
          against += std::string(against.empty() ? "" : ", ") + c.value("against", std::string("?")) + ": relative L2 " +
                     num(c.value("rel_l2", ca::Json())) + " from the seed-0 outputs";
    if (ev.contains("own_draws") && ev["own_draws"].is_object())
      return TaskVerdict{"task_insensitive",
                         "on its own draws the task's reference hardly depends on its inputs (seed 1: relative L2 " +
                             num(ev["own_draws"].value("rel_l2", ca::Json())) +
                             " from the seed-0 outputs, within the calibrated fp32 bound " +
                             num(ev["own_draws"].value("calibrated_bound_rel_l2", ca::Json())) +
                             "): a constant answer passes every plain draw, and a kernel can tell the checks' variants "
                             "apart and compute only on them, so no verdict here means anything"};
    return TaskVerdict{"task_insensitive",
                       "the task's reference hardly depends on its inputs (" + against +
                           ", within the published bound atol = rtol = 1e-2 and relative L2 5e-2): a constant answer "
                           "computed once at init would pass every check, so no verdict here means anything"};
  }
  if (reference.value("ill_conditioned", ca::Json()) == true) {
    const ca::Json ev = reference.value("ill_conditioned_evidence", ca::Json::object());
    return TaskVerdict{"task_ill_conditioned",
                       "the task's fp32 reference is " + num(ev.value("fp32_err_rel_l2", ca::Json())) +
                           " (relative L2) from its float64 run, over the cap " + num(ev.value("cap_rel_l2", ca::Json(5e-2))) +
                           " of every bound: the reference itself would fail, and so does every fp32 candidate, by the "
                           "task's fault"};
  }
  // The float64 run the calibrated bound is made from failed at load, even with the floating dtypes
  // the code names lifted (an op without a float64 kernel; out of memory is the node's, below): how
  // accurate fp32 is on this task is unknown. Judging with the published bound instead (what a missing calibration fell
  // back to before session 20) paid half a reduction or 16-bit weights read as fp32 on exactly these
  // tasks (red team R10), and the verdict told the policy which ones; so no verdict, as for the
  // other tasks no verdict can use. A stochastic reference has no float64 run by design (its own rule).
  const ca::Json ev = reference.value("ill_conditioned_evidence", ca::Json::object());
  if (!calibrated || reference.value("stochastic", false) == true || !reference.contains("ill_conditioned") ||
      !reference["ill_conditioned"].is_null() || !ev.is_object() || !ev.contains("error") || !ev["error"].is_string())
    return std::nullopt;
  // The float64 copy did not fit beside the judge's own memory (the worker's out_of_memory): the
  // node's limit, not the task's (node_error: --resume judges it again, on a GPU that holds it).
  if (ev.value("out_of_memory", false) == true)
    return TaskVerdict{"node_error", "the node could not run the task's reference in float64 (" + ev["error"].get<std::string>() +
                                         "), which the calibrated bound is made from: no verdict; --resume judges it "
                                         "again, on a GPU that holds the float64 copy"};
  return TaskVerdict{"task_uncalibrated",
                       "the task's reference could not run in float64 (" + ev["error"].get<std::string>() +
                           "): how accurate fp32 is on this task is unknown, so the calibrated bound cannot be made, "
                           "and the published one in its place would pass half-precision storage and sampled "
                           "reductions; no verdict (--tolerance published or strict judges it by that bound)"};
}

}  // namespace ca::kernel_check
