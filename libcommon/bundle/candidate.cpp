// A candidate's way from its record to a bound plan (candidate.hpp): one step a function, each
// refusal worded once here.
#include "libcommon/bundle/candidate.hpp"

#include <cctype>
#include <cmath>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"

namespace ca::bundle {

BundleSources read_bundle(const Json& record) {
  BundleSources out;
  auto bundle = get_required<Json>(record, "/bundle");
  if (!bundle.is_object()) throw FieldError("bundle", "expected an object with kernels and plan");
  auto kernels = get_required<Json>(record, "/bundle/kernels");
  if (!kernels.is_object()) throw FieldError("bundle.kernels", "expected an object {file: source}");
  for (auto& [file, src] : kernels.items()) {
    if (!src.is_string()) throw FieldError("bundle.kernels." + file, "expected the source text");
    out.kernels[file] = src.get<std::string>();
  }
  if (!bundle.contains("plan") || bundle["plan"].is_null()) throw FieldError("bundle.plan", "missing");
  out.plan = Json(bundle["plan"]);
  return out;
}

std::map<std::string, std::string> Candidate::kernel_precisions() const {
  std::map<std::string, std::string> out;
  if (!compiled_ok() || sources.kernels.empty()) return out;
  auto mangled_of = [&](const std::string& name) {
    auto it = compiled->lowered.find(name);
    return it == compiled->lowered.end() ? name : it->second;
  };
  std::vector<std::string> mangled;
  for (const auto& name : plan.kernel_names()) mangled.push_back(mangled_of(name));
  auto by_mangled = ca::bundle::kernel_precisions(scan_ptx(compiled->ptx), mangled);  // ptx_scan.hpp's
  for (const auto& name : plan.kernel_names()) out[name] = by_mangled[mangled_of(name)];
  return out;
}

std::string Candidate::precision(const BoundPlan* bound) const {
  std::string prec = "fp32";
  for (const auto& [name, kp] : kernel_precisions()) prec = lower_precision(prec, kp);
  for (auto* section : {&plan.init, &plan.forward})
    for (auto& s : *section)
      if (s.kind == Step::kGemm && s.gemm.compute == "tf32") prec = lower_precision(prec, "tf32");
  // Scratch declared in a narrow float type holds values of that precision, whatever writes them
  // (integer stores of rounded bits included). Integer scratch (flags, indices, masks) says nothing.
  for (const auto& d : plan.scratch) {
    if (d.dtype == "F16") prec = lower_precision(prec, "fp16");
    if (d.dtype == "BF16") prec = lower_precision(prec, "bf16");
    if (d.dtype.rfind("F8", 0) == 0) prec = lower_precision(prec, "fp8");
  }
  if (bound)
    for (auto* section : {&bound->init, &bound->forward})
      for (auto& s : *section) {
        std::string dt = s.kind == Step::kGemm ? s.gemm.dtype : s.kind == Step::kConv ? s.conv.dtype : "";
        if (dt == "F16") prec = lower_precision(prec, "fp16");
        if (dt == "BF16") prec = lower_precision(prec, "bf16");
      }
  return prec;
}

namespace {

Refusal plan_error(const std::string& reason, const std::string& kernel = "") {
  return Refusal{"plan_error", reason, kernel, std::nullopt, ""};
}

Refusal policy_violation(const Violation& v) { return Refusal{"policy_violation", v.rule + ": " + v.reason, "", v, ""}; }

// The identifier before any template argument list: "softmax<256>" -> "softmax".
std::string base_name(const std::string& expr) {
  std::string s = expr.substr(0, expr.find('<'));
  s.erase(s.find_last_not_of(" \t") + 1);
  auto colon = s.rfind("::");
  return colon == std::string::npos ? s : s.substr(colon + 2);
}

// Every kernel the plan launches is named in the sources, or the plan_error naming the first that
// is not. Asked only once a compile has failed (a kernel the sources never mention is a plan error,
// not a compile error): a name a macro makes (`#define K(n) my_##n`) is not in the text, yet it
// names a kernel the compiled code defines, and that code's rules judge it.
std::optional<Refusal> undefined_kernel(const Candidate& c) {
  std::string all_code;
  for (auto& [f, s] : c.sources.kernels) all_code += strip_comments(s) + "\n";
  // The name as a whole identifier: a scan, not std::regex (the text is the policy's, of any length).
  auto ident_char = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  auto mentions = [&](const std::string& id) {
    for (std::size_t at = all_code.find(id); !id.empty() && at != std::string::npos; at = all_code.find(id, at + 1))
      if ((at == 0 || !ident_char(all_code[at - 1])) && (at + id.size() == all_code.size() || !ident_char(all_code[at + id.size()])))
        return true;
    return false;
  };
  for (auto& name : c.plan.kernel_names()) {
    std::string base = base_name(name), id;
    for (char ch : base)
      if (ident_char(ch)) id += ch;
    if (!base.empty() && mentions(id)) continue;
    std::string where;
    for (auto* section : {&c.plan.init, &c.plan.forward})
      for (auto& s : *section)
        if (where.empty() && s.kind == Step::kLaunch && s.launch.kernel == name) where = s.label();
    return plan_error(where + ": kernel '" + name + "' is not defined in the bundle's sources", name);
  }
  return std::nullopt;
}

// A failed compile: a name expression that names no kernel is the plan's fault, the rest the code's.
Refusal compile_failure(const CompileResult& r) {
  Refusal out = r.name_error ? plan_error("kernel name '" + r.failed_name + "' does not name a kernel of the sources: " +
                                              r.first_error,
                                          r.failed_name)
                             : Refusal{"compile_error", r.first_error, "", std::nullopt, ""};
  out.log = r.log.size() > 4000 ? r.log.substr(0, 4000) + "\n[... log truncated]" : r.log;
  return out;
}

// The steps before the compiler: the plan parsed, sources present, the rules on plan and sources.
// Nothing, or the refusal.
std::optional<Refusal> before_compile(Candidate& c, const CandidateOptions& options) {
  try {
    c.plan = Plan::parse(c.sources.plan);
  } catch (const PlanError& e) {
    return plan_error(e.what());
  }
  if (c.sources.kernels.empty() && !c.plan.kernel_names().empty())
    return plan_error("the plan launches " + c.plan.kernel_names()[0] + " but the bundle has no kernel sources");
  if (options.rules) {
    if (auto v = options.rules->check_plan(c.plan)) return policy_violation(*v);
    if (auto v = options.rules->check_sources(c.sources.kernels)) return policy_violation(*v);
  }
  return std::nullopt;
}

// Static __shared__ and dynamic shared memory together: the target's opt-in limit is for both (a
// kernel with 48 KiB of static shared memory asking 200 KiB more at launch fails on an H100).
// ptxas's count of a kernel's static shared memory includes the 1 KiB per block that sm_80 and later
// reserve for the system (a 4-byte __shared__ array counts 1028), which the opt-in limit leaves out:
// that much is let through, so nothing the device would launch is refused here.
void check_shared_total(const BoundPlan& bp, const CompileResult& compiled, const LaunchLimits& limits) {
  constexpr int64_t kReserved = 1024;
  for (const auto* steps : {&bp.init, &bp.forward})
    for (const auto& s : *steps) {
      if (s.kind != Step::kLaunch) continue;
      const auto it = compiled.resources.find(s.launch.mangled);
      if (it == compiled.resources.end()) continue;
      const int64_t total = it->second.static_shared_bytes + int64_t(s.launch.shared);
      if (total > limits.dynamic_shared + kReserved)
        throw PlanError(s.label + ": shared = " + std::to_string(s.launch.shared) + " bytes of dynamic shared memory and the kernel's " +
                            std::to_string(it->second.static_shared_bytes) + " bytes of static __shared__ (as ptxas counts it, with the " +
                            "1 KiB the system reserves) are " + std::to_string(total) + " bytes (" + limits.arch + " allows at most " +
                            std::to_string(limits.dynamic_shared) + " per block, both together, besides the reserved 1 KiB)",
                        s.launch.kernel);
    }
}

}  // namespace

Binding bind_candidate(const Candidate& c, const IoSpec& io, const LaunchLimits& limits, const Rules* rules) {
  Binding out;
  try {
    out.bound = bind_plan(c.plan, c.signatures, io, limits);
    if (c.compiled) check_shared_total(*out.bound, *c.compiled, limits);
    out.scratch_bytes = out.bound->scratch_bytes();  // PlanError when the sizes add up past 2^63
    if (rules && !rules->scratch_cap_by_judge) out.scratch_cap = rules->scratch_cap_for(io);
    if (rules)
      if (auto v = rules->check_bound(*out.bound, io)) out.refused = policy_violation(*v);
  } catch (const PlanError& e) {
    out.refused = plan_error(e.what(), e.kernel);
  }
  return out;
}

Candidate compiled_candidate(const Json& plan, CompileResult compiled) {
  Candidate c;
  c.sources.plan = plan;
  c.plan = Plan::parse(plan);
  c.signatures = signatures_of(compiled);
  c.compiled = std::make_shared<const CompileResult>(std::move(compiled));
  return c;
}

Candidate prepare_candidate(BundleSources sources, const IoSpec* io, const CandidateOptions& options) {
  Candidate c;
  c.sources = std::move(sources);
  if ((c.refused = before_compile(c, options))) return c;
  CompileOptions copt;
  copt.arch = options.arch;
  copt.cache_dir = options.cache_dir;
  copt.use_cache = options.use_cache;
  copt.extra_flags = options.extra_flags;
  c.compiled = std::make_shared<const CompileResult>(compile_bundle(c.sources.kernels, c.plan.kernel_names(), copt));
  if (!c.compiled->ok) {
    // A launched kernel the sources never name: the plan's fault, said as such (the compile, which
    // failed on it, is not reported).
    if (auto undefined = undefined_kernel(c)) {
      c.refused = undefined;
      c.compiled.reset();
      return c;
    }
    c.refused = compile_failure(*c.compiled);
    return c;
  }
  if (options.rules)
    if (auto v = options.rules->check_compiled(*c.compiled)) {
      c.refused = policy_violation(*v);
      return c;
    }
  c.signatures = signatures_of(*c.compiled);
  // Launch sizes against the target: options.arch's limits (a GPU's own when one binds it later).
  const auto limits = LaunchLimits::for_arch(options.arch);
  try {
    check_plan(c.plan, c.signatures, io, limits);
  } catch (const PlanError& e) {
    c.refused = plan_error(e.what(), e.kernel);
    return c;
  }
  if (io && io->shapes_known()) {
    c.binding = bind_candidate(c, *io, limits, options.rules);
    c.refused = c.binding.refused;
  }
  return c;
}

}  // namespace ca::bundle
