// The check section's verdicts and findings (verdicts.hpp).
#include "tools/kernel-check/verdicts.hpp"

#include <cmath>

#include "libcommon/errors.hpp"
#include "libcommon/worker/requests.hpp"

namespace ca::kernel_check {

void set_verdict(ca::Json& check, const std::string& status, const std::string& reason) {
  check["status"] = status;
  check["reason"] = reason;
  if (status == "passed") check["correct"] = true;
  else if (status == "no_device") check["correct"] = nullptr;
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
}

ca::Json reference_check(const ca::Json& task, const ca::Json* load, bool allow_stochastic) {
  std::string mode;
  try {
    mode = ca::worker::request::task_mode(task);
  } catch (const ca::FieldError& e) {
    throw ca::FieldError("task." + e.field, e.reason);
  }
  // What the task record says: its reference section, else the top-level flag of older records.
  ca::Json said = nullptr;
  if (task.contains("reference") && task["reference"].is_object() && task["reference"].contains("stochastic") &&
      task["reference"]["stochastic"].is_boolean())
    said = task["reference"]["stochastic"];
  else if (task.contains("stochastic") && task["stochastic"].is_boolean())
    said = task["stochastic"];
  ca::Json r{{"mode", mode}, {"stochastic", said}, {"from", said.is_null() ? ca::Json(nullptr) : ca::Json("task_record")}};
  if (load) {
    if (load->contains("mode") && (*load)["mode"].is_string()) r["mode"] = (*load)["mode"];  // what ran
    // The judge's own measurement decides, never the record's word: a record is client input, and a
    // claim of stochastic would turn a wrong kernel's verdict into task_stochastic (no penalty). A
    // record that disagrees is kept beside it for the reader.
    const bool measured = load->value("stochastic", false);
    r["stochastic"] = measured;
    r["from"] = "worker";
    if (!said.is_null() && said != measured) r["task_record_said"] = said;
  }
  if (r["stochastic"] == true) r["rule"] = allow_stochastic ? "allow_stochastic" : "task_stochastic";
  return r;
}

}  // namespace ca::kernel_check
