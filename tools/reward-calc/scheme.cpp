// Reward schemes: the milestone reward of DESIGN.md §7 and the speedup alternatives.
#include "tools/reward-calc/scheme.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <vector>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/measure/stats.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/yaml.hpp"

namespace ca::reward_calc {
namespace {

// The names kernel-prof may give the baseline timed with the candidate's precision allowed
// (tf32/fp16/bf16); the first present wins.
const char* const kMatchedCompileKeys[] = {"compile_precision_matched", "compile_matched"};

// JSON keeps -1 as -1 (not -1.0) when a value is integral, so milestone rewards read as integers.
Json number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return static_cast<int64_t>(v);
  return v;
}

std::string percent(double gain) {
  char buf[64];
  if (gain >= 0) std::snprintf(buf, sizeof buf, "%.1f%% faster than", gain * 100);
  else std::snprintf(buf, sizeof buf, "%.1f%% slower than", -gain * 100);
  return buf;
}

std::string fixed(double v, const char* format = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A time is a number or an object with a numeric `median` (kernel-prof's summary); finite, > 0.
std::optional<double> optional_time(const Json& record, const std::string& pointer) {
  const auto ptr = Json::json_pointer(pointer);
  if (!record.contains(ptr) || record.at(ptr).is_null()) return std::nullopt;
  const Json& v = record.at(ptr);
  const Json* number_node = &v;
  std::string field = field_name(pointer);
  if (v.is_object()) {
    if (!v.contains("median")) throw FieldError(field, "an object without 'median'");
    number_node = &v["median"];
    field += ".median";
  }
  if (!number_node->is_number())
    throw FieldError(field, std::string("expected a number of microseconds, got ") + number_node->type_name() + " " +
                                number_node->dump().substr(0, 40));
  double t = number_node->get<double>();
  if (!std::isfinite(t) || t <= 0) throw FieldError(field, "expected a finite time > 0, got " + number_node->dump());
  return t;
}

double required_time(const Json& record, const std::string& pointer, const std::string& hint) {
  auto t = optional_time(record, pointer);
  if (!t) throw FieldError(field_name(pointer), "missing" + hint);
  return *t;
}

template <class E>
E parse_choice(const std::string& option, const std::string& text, std::initializer_list<std::pair<const char*, E>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
    names += std::string(names.empty() ? "" : ", ") + name;
  }
  throw UsageError(option + ": expected one of " + names + ", got '" + text + "'");
}

}  // namespace

Scheme parse_scheme(const std::string& text) {
  return parse_choice<Scheme>("--scheme", text,
                              {{"milestone", Scheme::milestone}, {"speedup", Scheme::speedup}, {"log-speedup", Scheme::log_speedup}});
}

CompileBaseline parse_compile_baseline(const std::string& text) {
  return parse_choice<CompileBaseline>("--compile-baseline", text,
                                       {{"plain", CompileBaseline::plain}, {"precision-matched", CompileBaseline::precision_matched}});
}

SpeedupBaseline parse_speedup_baseline(const std::string& text) {
  return parse_choice<SpeedupBaseline>("--speedup-baseline", text,
                                       {{"compile", SpeedupBaseline::compile}, {"eager", SpeedupBaseline::eager}});
}

std::string scheme_name(Scheme s) {
  switch (s) {
    case Scheme::milestone: return "milestone";
    case Scheme::speedup: return "speedup";
    case Scheme::log_speedup: return "log-speedup";
  }
  return "?";
}

bool is_failure_status(const std::string& status) {
  static const std::set<std::string> failures = {"compile_error", "plan_error", "policy_violation", "runtime_error",
                                                 "timeout",       "incorrect",  "failed"};
  return failures.count(status) > 0;
}

void Config::load_yaml(const std::string& path) {
  Json root;
  try {
    YamlLimits limits;
    limits.kind = "config";
    root = yaml_to_json(read_file(path), "--config " + path, limits);
  } catch (const YamlError& e) {
    throw UsageError(e.syntax ? "--config " + path + ": not YAML: " + e.detail : std::string(e.what()));
  }
  if (!root.is_object()) throw UsageError("--config " + path + ": expected a mapping of settings");
  for (const std::string& key : yaml_keys(root)) {
    const Json& v = root[key];
    try {
      if (key == "scheme") scheme = parse_scheme(yaml_string(v));
      else if (key == "margin") margin = yaml_double(v);
      else if (key == "compile_baseline") compile_baseline = parse_compile_baseline(yaml_string(v));
      else if (key == "speedup_baseline") speedup_baseline = parse_speedup_baseline(yaml_string(v));
      else if (key == "failure_value") failure_value = yaml_double(v);
      else if (key == "violation_penalty") violation_penalty = yaml_double(v);
      else if (key == "log_clip") log_clip = yaml_double(v);
      else if (key == "allow_unprofiled") allow_unprofiled = yaml_bool(v);
      else throw UsageError("--config " + path + ": unknown key '" + key + "'");
    } catch (const YamlError&) {
      throw UsageError("--config " + path + ": " + key + ": bad value '" + yaml_text(v) + "'");
    }
  }
}

void Config::validate() const {
  if (!(margin >= 0 && margin < 1)) throw UsageError("--margin: expected 0 <= m < 1, got " + fixed(margin));
  if (!(log_clip > 0) || !std::isfinite(log_clip)) throw UsageError("--log-clip: expected a finite number > 0");
  if (!std::isfinite(failure_value) || !std::isfinite(violation_penalty))
    throw UsageError("--failure-value and --violation-penalty must be finite");
}

Json Config::to_json() const {
  Json j = {{"scheme", scheme_name(scheme)}, {"failure_value", failure_value}, {"violation_penalty", violation_penalty},
            {"allow_unprofiled", allow_unprofiled}};
  if (scheme == Scheme::milestone) j["margin"] = margin;
  else j["speedup_baseline"] = speedup_baseline == SpeedupBaseline::compile ? "compile" : "eager";
  if (scheme == Scheme::log_speedup) j["log_clip"] = log_clip;
  j["compile_baseline"] = compile_baseline == CompileBaseline::plain ? "plain" : "precision-matched";
  return j;
}

namespace {

// The value of "correct and not faster": milestone 1, speedup 1.0 (t_base/t taken as 1), log-speedup 0.
double not_faster_value(const Config& config) {
  return config.scheme == Scheme::milestone ? 1.0 : config.scheme == Scheme::speedup ? 1.0 : 0.0;
}

// Step 1: verdicts against the candidate, which every scheme gives a fixed value. True when r is
// decided; throws FieldError when the check section contradicts itself or lacks check.correct.
bool score_check(const Json& record, const Config& config, Json& r, Verdict& out_verdict) {
  if (!record.contains("check") || record["check"].is_null())
    throw FieldError("check", "missing (run kernel-check before reward-calc)");
  if (!record["check"].is_object()) throw FieldError("check", std::string("expected an object, got ") + record["check"].type_name());
  auto status = get_optional<std::string>(record, "/check/status");
  auto correct = get_optional<bool>(record, "/check/correct");
  auto check_reason = get_optional<std::string>(record, "/check/reason");
  if (status) r["check_status"] = *status;
  std::string because = check_reason ? ": " + *check_reason : "";

  if (status && *status == "policy_violation") {
    r["value"] = number(config.violation_penalty);
    r["reason"] = "policy violation" + because;
    out_verdict = Verdict::scored_violation;
    return true;
  }
  if ((correct && !*correct) || (status && is_failure_status(*status))) {
    r["value"] = number(config.failure_value);
    r["reason"] = "check failed (" + (status ? *status : std::string("correct = false")) + ")" + because;
    out_verdict = Verdict::scored_failed;
    return true;
  }
  if (!correct)
    throw FieldError("check.correct", status ? "missing: the candidate was not judged (check.status '" + *status + "')"
                                             : std::string("missing"));
  if (status && *status != "passed")
    throw FieldError("check.status", "'" + *status + "' contradicts check.correct = true");
  return false;
}

// Step 2: a correct candidate without a profile (--allow-unprofiled), or whose timed calls gave wrong
// outputs (DESIGN.md §6: right when checked, wrong when timed). True when r is decided.
bool score_profile_state(const Json& record, const Config& config, Json& r, Verdict& out_verdict) {
  const bool has_prof = record.contains("prof") && !record["prof"].is_null();
  if (!has_prof) {
    if (!config.allow_unprofiled)
      throw FieldError("prof", "missing: the check passed but the candidate was not profiled "
                               "(run kernel-prof, or pass --allow-unprofiled to score it as correct and not faster)");
    r["value"] = number(not_faster_value(config));
    r["reason"] = "correct, not profiled (--allow-unprofiled): scored as not faster";
    r["unprofiled"] = true;
    out_verdict = Verdict::unprofiled;
    return true;
  }
  if (!record["prof"].is_object()) throw FieldError("prof", std::string("expected an object, got ") + record["prof"].type_name());
  auto prof_status = get_optional<std::string>(record, "/prof/status");
  // The node could not time it (kernel-prof's node_error, correct null): no verdict, as a check's
  // node_error: the record gets an error section, no reward and no -1.
  if (prof_status && *prof_status == "node_error") {
    auto prof_reason = get_optional<std::string>(record, "/prof/reason");
    throw FieldError("prof.status", "node_error: the node could not time the candidate" +
                                        (prof_reason ? " (" + *prof_reason + ")" : std::string()) +
                                        "; no reward and no -1: time it again (kernel-prof --resume) on a GPU that holds it");
  }
  auto prof_correct = get_optional<bool>(record, "/prof/correct");
  if ((prof_correct && !*prof_correct) || (prof_status && *prof_status == "failed")) {
    auto prof_reason = get_optional<std::string>(record, "/prof/reason");
    r["value"] = number(config.failure_value);
    // (prof.reason says which: a timed call's outputs, a state it left, or the rules on the code the GPU loaded)
    r["reason"] = "the timing failed the candidate" + (prof_reason ? ": " + *prof_reason : std::string());
    out_verdict = Verdict::scored_failed;
    return true;
  }
  return false;
}

// The baselines a correct candidate is compared with: their keys, times, and why they do not
// compare with the candidate's time (empty when they do).
struct Baselines {
  std::string eager_key, compile_key;
  std::optional<double> te, tc;
  std::string incomparable;
  std::vector<std::string> matched_slower;  // modes whose precision-matched baseline was slower than the plain one
};

// Which baselines: by default, where kernel-prof timed one at the candidate's precision (TF32 on, or
// autocast), the faster of it and the plain fp32 one, mode by mode; the plain fp32 ones when the
// kernel computes in fp32 (then plain is the match) or with --compile-baseline plain.
// Why the faster: fp32 PyTorch is as accurate as any precision a kernel is read to compute in, so it
// is a fair competitor of every kernel; autocast's casts can make the matched baseline the slower
// one (a small GEMM between fp32-only ops), and then a kernel read as fp16 (one live half
// instruction is enough) would face a lower bar than the same kernel read as fp32. A lower precision
// never lowers the bar.
Baselines read_baselines(const Json& record, const Config& config, const std::optional<std::string>& cand_metric,
                         bool need_eager, bool need_compile) {
  Baselines b;
  auto has = [&](const std::string& key) { return record.contains(Json::json_pointer("/prof/baselines/" + key)); };
  auto matched_key = [&](const std::string& mode) -> std::string {
    if (config.compile_baseline != CompileBaseline::precision_matched) return mode;
    if (has(mode + "_precision_matched")) return mode + "_precision_matched";
    if (mode == "compile")
      for (const char* key : kMatchedCompileKeys)
        if (has(key)) return key;
    return mode;
  };
  b.eager_key = matched_key("eager");
  b.compile_key = matched_key("compile");
  // A baseline's time, or why it has none that compares with the candidate's.
  auto baseline_time = [&](const std::string& key, bool needed) -> std::optional<double> {
    const std::string base = "/prof/baselines/" + key;
    if (!has(key)) {
      if (needed) throw FieldError(field_name(base + "/time_us"), "missing (kernel-prof --baselines eager,compile times it)");
      return std::nullopt;
    }
    if (!record.contains(Json::json_pointer(base + "/time_us")) || record.at(Json::json_pointer(base + "/time_us")).is_null()) {
      auto err = get_optional<std::string>(record, base + "/error");
      if (!err) {
        if (needed) throw FieldError(field_name(base + "/time_us"), "missing (kernel-prof --baselines eager,compile times it)");
        return std::nullopt;
      }
      auto detail = get_optional<std::string>(record, base + "/detail");
      if (needed && b.incomparable.empty()) b.incomparable = key + " baseline: " + *err + (detail ? ": " + *detail : std::string());
      return std::nullopt;
    }
    auto metric = get_optional<std::string>(record, base + "/metric");
    if (needed && cand_metric && metric && *metric != *cand_metric && b.incomparable.empty())
      b.incomparable = key + " baseline is " + *metric + " time, the candidate's " + *cand_metric + " time (never compared)";
    return optional_time(record, base + "/time_us");
  };
  // The bar of one mode: its matched baseline's time or the plain one's, whichever is smaller; both
  // must have a time (a matched one without the plain one beside it cannot be known to be the bar).
  auto bar = [&](const std::string& mode, std::string& key, bool needed) -> std::optional<double> {
    auto t = baseline_time(key, needed);
    if (key == mode) return t;
    auto plain = baseline_time(mode, needed);
    if (!t || !plain) return std::nullopt;
    if (*plain < *t) {
      b.matched_slower.push_back(mode);
      key = mode;
      return plain;
    }
    return t;
  };
  b.te = bar("eager", b.eager_key, need_eager);
  b.tc = bar("compile", b.compile_key, need_compile);
  return b;
}

// The times and speedups against each baseline, and the plain fp32 comparison beside the matched
// one it did not decide.
void add_comparisons(const Json& record, const Config& config, double t, const Baselines& b, Json& r) {
  r["time_us"] = t;
  if (!b.matched_slower.empty()) r["matched_slower"] = b.matched_slower;
  if (b.te) {
    if (b.eager_key != "eager") r["eager_baseline"] = b.eager_key;
    r["eager_time_us"] = *b.te;
    r["speedup_vs_eager"] = *b.te / t;
    r["gain_vs_eager"] = (*b.te - t) / *b.te;
  }
  if (b.tc) {
    r["compile_baseline"] = b.compile_key;
    r["compile_time_us"] = *b.tc;
    r["speedup_vs_compile"] = *b.tc / t;
    r["gain_vs_compile"] = (*b.tc - t) / *b.tc;
  }
  if ((b.te && b.eager_key != "eager") || (b.tc && b.compile_key != "compile")) {
    Json plain = Json::object();
    auto pe = optional_time(record, "/prof/baselines/eager/time_us");
    auto pc = optional_time(record, "/prof/baselines/compile/time_us");
    if (pe) plain["speedup_vs_eager"] = *pe / t;
    if (pc) plain["speedup_vs_compile"] = *pc / t;
    if (config.scheme == Scheme::milestone && pe && pc) {
      const bool be = (*pe - t) / *pe > config.margin + kMarginEpsilon, bc = (*pc - t) / *pc > config.margin + kMarginEpsilon;
      plain["value"] = be && bc ? 3 : be ? 2 : 1;
    }
    r["plain"] = plain;
  }
}

// Noise: a decision the measured intervals leave open (kernel-prof measured it again, up to its
// budget) is marked, so a reader knows which rewards rest on a margin inside the noise.
bool mark_noise(const Json& record, const Config& config, double t, const Baselines& b, Json& r) {
  auto rel_ci_of = [&](const std::string& pointer) -> std::optional<double> {
    auto p = Json::json_pointer(pointer + "/rel_ci");
    if (record.contains(p) && record.at(p).is_number()) return record.at(p).get<double>();
    return std::nullopt;
  };
  bool within_noise = false;
  if (b.te) within_noise |= measure::decide_margin(t, rel_ci_of("/prof/time_us"), *b.te, rel_ci_of("/prof/baselines/" + b.eager_key + "/time_us"), config.margin).ambiguous;
  if (b.tc) within_noise |= measure::decide_margin(t, rel_ci_of("/prof/time_us"), *b.tc, rel_ci_of("/prof/baselines/" + b.compile_key + "/time_us"), config.margin).ambiguous;
  if (within_noise) {
    r["within_noise"] = true;
    if (auto rounds = get_optional<int64_t>(record, "/prof/remeasured")) r["remeasured"] = *rounds;
  }
  return within_noise;
}

// The milestone value (DESIGN.md §7): 3 faster than both baselines by the margin, 2 than eager, else 1.
void score_milestone(const Config& config, double t, const Baselines& b, bool within_noise, Json& r) {
  // (t0 - t)/t0 > m, with the epsilon of kMarginEpsilon against decimal rounding.
  const double gain_e = (*b.te - t) / *b.te, gain_c = (*b.tc - t) / *b.tc;
  const bool beats_eager = gain_e > config.margin + kMarginEpsilon;
  const bool beats_compile = gain_c > config.margin + kMarginEpsilon;
  int v = beats_eager && beats_compile ? 3 : beats_eager ? 2 : 1;
  r["value"] = v;
  r["margin"] = config.margin;
  r["faster_than_eager"] = beats_eager;
  r["faster_than_compile"] = beats_compile;
  std::string m = fixed(config.margin * 100, "%g") + "%";
  r["reason"] = "correct; " + percent(gain_e) + " " + b.eager_key + ", " + percent(gain_c) + " " + b.compile_key +
                (v == 3   ? " (more than " + m + " faster than both)"
                 : v == 2 ? " (more than " + m + " faster than eager only)"
                          : " (not more than " + m + " faster than eager)") +
                (within_noise ? "; the margin lies within the measured noise" : "");
}

// The speedup and log-speedup values against the chosen baseline.
void score_speedup(const Config& config, double t, const Baselines& b, Json& r) {
  const bool vs_compile = config.speedup_baseline == SpeedupBaseline::compile;
  const double base = vs_compile ? *b.tc : *b.te;
  const std::string base_name = vs_compile ? b.compile_key : b.eager_key;
  const double speedup = base / t;
  r["speedup_baseline"] = base_name;
  if (config.scheme == Scheme::speedup) {
    r["value"] = speedup;
    r["reason"] = "correct; speedup t_" + base_name + "/t = " + fixed(speedup);
  } else {
    const double raw = std::log(speedup);
    const double clipped = std::clamp(raw, -config.log_clip, config.log_clip);
    r["value"] = clipped;
    r["log_clip"] = config.log_clip;
    r["reason"] = "correct; ln(t_" + base_name + "/t) = " + fixed(raw) +
                  (clipped != raw ? ", clipped to " + fixed(clipped) : std::string());
  }
}

}  // namespace

Json score(const Json& record, const Config& config, Verdict* verdict) {
  Verdict local;
  Verdict& out_verdict = verdict ? *verdict : local;
  Json r = Json::object();
  r["value"] = nullptr;  // first key, filled below
  r["scheme"] = scheme_name(config.scheme);
  // 1. Verdicts against the candidate; 2. correct, but unprofiled or wrong when timed.
  if (score_check(record, config, r, out_verdict)) return r;
  if (score_profile_state(record, config, r, out_verdict)) return r;

  // 3. Correct and profiled: the score depends on the times. Without a time that can be compared,
  // it is scored as correct and not faster, with the reason.
  auto not_comparable = [&](const std::string& why) {
    r["value"] = number(not_faster_value(config));
    r["comparable"] = false;
    r["reason"] = "correct; no speedup: " + why;
    out_verdict = Verdict::scored_correct;
    return r;
  };
  if (auto why = get_optional<std::string>(record, "/prof/no_speedup")) return not_comparable(*why);
  const double t = required_time(record, "/prof/time_us", " (kernel-prof gives the candidate's time there)");
  const auto cand_metric = get_optional<std::string>(record, "/prof/method/metric");
  const bool milestone = config.scheme == Scheme::milestone;
  const bool need_eager = milestone || config.speedup_baseline == SpeedupBaseline::eager;
  const bool need_compile = milestone || config.speedup_baseline == SpeedupBaseline::compile;
  const Baselines b = read_baselines(record, config, cand_metric, need_eager, need_compile);
  if (!b.incomparable.empty()) return not_comparable(b.incomparable);

  add_comparisons(record, config, t, b, r);
  const bool within_noise = mark_noise(record, config, t, b, r);
  if (milestone)
    score_milestone(config, t, b, within_noise, r);
  else
    score_speedup(config, t, b, r);
  out_verdict = Verdict::scored_correct;
  return r;
}

}  // namespace ca::reward_calc
