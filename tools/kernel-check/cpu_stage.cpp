// The CPU stage: bundle -> plan -> rules -> NVRTC -> plan checks.
#include "tools/kernel-check/prepare.hpp"

#include <cctype>
#include <string>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/worker/requests.hpp"

namespace ca::kernel_check {

void set_verdict(ca::Json& check, const std::string& status, const std::string& reason) {
  check["status"] = status;
  check["reason"] = reason;
  if (status == "passed") check["correct"] = true;
  else if (status == "no_device") check["correct"] = nullptr;
  else check["correct"] = false;
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

static std::string rank_precision(const std::string& a, const std::string& b) { return ca::bundle::lower_precision(a, b); }

std::map<std::string, std::string> launched_kernel_precisions(const Prepared& p) {
  std::map<std::string, std::string> out;
  if (!p.compiled || !p.compiled->ok || p.kernels.empty()) return out;
  std::vector<std::string> mangled;
  for (const auto& name : p.plan.kernel_names()) {
    auto it = p.compiled->lowered.find(name);
    mangled.push_back(it == p.compiled->lowered.end() ? name : it->second);
  }
  auto by_mangled = ca::bundle::kernel_precisions(ca::bundle::scan_ptx(p.compiled->ptx), mangled);
  for (const auto& name : p.plan.kernel_names()) {
    auto it = p.compiled->lowered.find(name);
    out[name] = by_mangled[it == p.compiled->lowered.end() ? name : it->second];
  }
  return out;
}

std::string candidate_precision(const Prepared& p, const ca::bundle::BoundPlan* bound) {
  // The kernels the plan launches (init and forward) and what they can call; a kernel never
  // launched does not count.
  std::string prec = "fp32";
  for (const auto& [name, kp] : launched_kernel_precisions(p)) prec = rank_precision(prec, kp);
  for (auto* section : {&p.plan.init, &p.plan.forward})
    for (auto& s : *section)
      if (s.kind == ca::bundle::Step::kGemm && s.gemm.compute == "tf32") prec = rank_precision(prec, "tf32");
  if (bound)
    for (auto* section : {&bound->init, &bound->forward})
      for (auto& s : *section) {
        std::string dt = s.kind == ca::bundle::Step::kGemm ? s.gemm.dtype : s.kind == ca::bundle::Step::kConv ? s.conv.dtype : "";
        if (dt == "F16") prec = rank_precision(prec, "fp16");
        if (dt == "BF16") prec = rank_precision(prec, "bf16");
      }
  return prec;
}

// The identifier before any template argument list: "softmax<256>" -> "softmax".
static std::string base_name(const std::string& expr) {
  std::string s = expr.substr(0, expr.find('<'));
  s.erase(s.find_last_not_of(" \t") + 1);
  auto colon = s.rfind("::");
  return colon == std::string::npos ? s : s.substr(colon + 2);
}

namespace {

// The record's bundle: its kernel sources and plan text (FieldError when they are not there), the
// task's tensors, and the check section's first fields.
Prepared read_candidate(const ca::Json& record, const ca::Json* task, const PrepareOptions& options) {
  Prepared p;
  auto bundle = ca::get_required<ca::Json>(record, "/bundle");
  if (!bundle.is_object()) throw ca::FieldError("bundle", "expected an object with kernels and plan");
  auto kernels = ca::get_required<ca::Json>(record, "/bundle/kernels");
  if (!kernels.is_object()) throw ca::FieldError("bundle.kernels", "expected an object {file: source}");
  for (auto& [file, src] : kernels.items()) {
    if (!src.is_string()) throw ca::FieldError("bundle.kernels." + file, "expected the source text");
    p.kernels[file] = src.get<std::string>();
  }
  if (!bundle.contains("plan") || bundle["plan"].is_null()) throw ca::FieldError("bundle.plan", "missing");
  p.plan_json = ca::Json(bundle["plan"]);
  if (task) p.io = ca::bundle::IoSpec::from_json(*task);
  p.check["compiled"] = false;
  p.check["correct"] = false;
  p.check["arch"] = options.arch;

  return p;
}

// Every kernel the plan launches is named in the sources: false, with a plan_error verdict naming
// the first that is not (a kernel the sources never mention is a plan error, not a compile error).
bool kernels_defined(Prepared& p) {
  std::string all_code;
  for (auto& [f, s] : p.kernels) all_code += strip_comments(s) + "\n";
  // The name as a whole identifier: a scan, not std::regex (the text is the policy's, of any length).
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto mentions = [&](const std::string& id) {
    for (std::size_t at = all_code.find(id); !id.empty() && at != std::string::npos; at = all_code.find(id, at + 1))
      if ((at == 0 || !ident_char(all_code[at - 1])) && (at + id.size() == all_code.size() || !ident_char(all_code[at + id.size()])))
        return true;
    return false;
  };
  for (auto& name : p.plan.kernel_names()) {
    std::string base = base_name(name), id;
    for (char c : base)
      if (ident_char(c)) id += c;
    if (base.empty() || !mentions(id)) {
      std::string where;
      for (auto* section : {&p.plan.init, &p.plan.forward})
        for (auto& s : *section)
          if (where.empty() && s.kind == ca::bundle::Step::kLaunch && s.launch.kernel == name) where = s.label();
      set_verdict(p.check, "plan_error", where + ": kernel '" + name + "' is not defined in the bundle's sources");
      p.check["kernel"] = name;
      p.final = true;
      return false;
    }
  }

  return true;
}

// The sources compiled for options.arch (the compile fields of the check section): false, with a
// compile_error or plan_error verdict and the log, when they do not compile.
bool compile_candidate(Prepared& p, const PrepareOptions& options) {
  ca::bundle::CompileOptions copt;
  copt.arch = options.arch;
  copt.cache_dir = options.cache_dir;
  copt.use_cache = options.use_cache;
  copt.extra_flags = options.extra_flags;
  auto result = std::make_shared<ca::bundle::CompileResult>(ca::bundle::compile_bundle(p.kernels, p.plan.kernel_names(), copt));
  p.compiled = result;
  p.check["compile_ms"] = std::round(result->compile_ms * 1000) / 1000;
  p.check["cached"] = result->cached;
  p.check["flags"] = result->flags;
  p.check["nvrtc"] = result->nvrtc_version;
  if (!result->confinement.empty()) p.check["compile_confinement"] = result->confinement;
  if (!result->ok) {
    if (result->name_error) {
      set_verdict(p.check, "plan_error", "kernel name '" + result->failed_name + "' does not name a kernel of the sources: " +
                                             result->first_error);
      p.check["kernel"] = result->failed_name;
    } else {
      set_verdict(p.check, "compile_error", result->first_error);
    }
    std::string log = result->log;
    if (log.size() > 4000) log = log.substr(0, 4000) + "\n[... log truncated]";
    p.check["log"] = log;
    p.final = true;
    return false;
  }
  return true;
}

}  // namespace

Prepared prepare_candidate(const ca::Json& record, const ca::Json* task, const Rules& rules,
                           const PrepareOptions& options) {
  Prepared p = read_candidate(record, task, options);
  auto fail = [&](const std::string& status, const std::string& reason) {
    set_verdict(p.check, status, reason);
    p.final = true;
    return p;
  };

  try {
    p.plan = ca::bundle::Plan::parse(p.plan_json);
  } catch (const ca::bundle::PlanError& e) {
    return fail("plan_error", e.what());
  }
  if (p.kernels.empty() && !p.plan.kernel_names().empty())
    return fail("plan_error", "the plan launches " + p.plan.kernel_names()[0] + " but the bundle has no kernel sources");
  if (auto v = rules.check_plan(p.plan)) {
    p.check["violation"] = v->to_json();
    return fail("policy_violation", v->rule + ": " + v->reason);
  }
  if (auto v = rules.check_sources(p.kernels)) {
    p.check["violation"] = v->to_json();
    return fail("policy_violation", v->rule + ": " + v->reason);
  }
  if (!kernels_defined(p)) return p;
  if (!compile_candidate(p, options)) return p;
  const auto result = p.compiled;
  p.check["compiled"] = true;
  p.check["resources"] = result->resources_json();
  p.check["precision"] = candidate_precision(p, nullptr);
  if (auto per_kernel = launched_kernel_precisions(p); !per_kernel.empty()) p.check["kernel_precision"] = per_kernel;
  if (auto v = rules.check_compiled(*result)) {
    p.check["violation"] = v->to_json();
    return fail("policy_violation", v->rule + ": " + v->reason);
  }
  p.signatures = ca::bundle::signatures_of(*result);
  try {
    // Launch sizes against the target: --arch's limits (compile-only), else the device's arch.
    const auto limits = ca::bundle::LaunchLimits::for_arch(options.arch);
    ca::bundle::check_plan(p.plan, p.signatures, task ? &p.io : nullptr, limits);
    if (p.io.shapes_known()) {
      auto bound = ca::bundle::bind_plan(p.plan, p.signatures, p.io, limits);
      p.check["precision"] = candidate_precision(p, &bound);
      p.check["scratch_bytes"] = bound.scratch_bytes();
      if (auto v = rules.check_bound(bound, p.io)) {
        p.check["violation"] = v->to_json();
        return fail("policy_violation", v->rule + ": " + v->reason);
      }
    }
  } catch (const ca::bundle::PlanError& e) {
    set_verdict(p.check, "plan_error", e.what());
    if (!e.kernel.empty()) p.check["kernel"] = e.kernel;
    p.final = true;
    return p;
  }
  return p;
}

}  // namespace ca::kernel_check
