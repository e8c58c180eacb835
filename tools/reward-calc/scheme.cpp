// Reward schemes: the milestone reward of DESIGN.md §7 and the speedup alternatives.
#include "tools/reward-calc/scheme.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/paths.hpp"

namespace ca::reward {
namespace {

// The names kernel-prof may give the baseline timed with the candidate's precision allowed
// (tf32/fp16/bf16); the first present wins.
const char* const kMatchedCompileKeys[] = {"compile_precision_matched", "compile_matched"};

// JSON keeps -1 as -1 (not -1.0) when a value is integral, so milestone rewards read as integers.
Record number(double v) {
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
std::optional<double> optional_time(const Record& record, const std::string& pointer) {
  const auto ptr = Record::json_pointer(pointer);
  if (!record.contains(ptr) || record.at(ptr).is_null()) return std::nullopt;
  const Record& v = record.at(ptr);
  const Record* number_node = &v;
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

double required_time(const Record& record, const std::string& pointer, const std::string& hint) {
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
  YAML::Node root;
  try {
    root = YAML::Load(read_file(path));
  } catch (const YAML::Exception& e) {
    throw UsageError("--config " + path + ": not YAML: " + e.what());
  }
  if (!root.IsMap()) throw UsageError("--config " + path + ": expected a mapping of settings");
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    const YAML::Node& v = item.second;
    try {
      if (key == "scheme") scheme = parse_scheme(v.as<std::string>());
      else if (key == "margin") margin = v.as<double>();
      else if (key == "compile_baseline") compile_baseline = parse_compile_baseline(v.as<std::string>());
      else if (key == "speedup_baseline") speedup_baseline = parse_speedup_baseline(v.as<std::string>());
      else if (key == "failure_value") failure_value = v.as<double>();
      else if (key == "violation_penalty") violation_penalty = v.as<double>();
      else if (key == "log_clip") log_clip = v.as<double>();
      else if (key == "allow_unprofiled") allow_unprofiled = v.as<bool>();
      else throw UsageError("--config " + path + ": unknown key '" + key + "'");
    } catch (const YAML::Exception& e) {
      throw UsageError("--config " + path + ": " + key + ": bad value '" + YAML::Dump(v) + "'");
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

Record score(const Record& record, const Config& config, Verdict* verdict) {
  Verdict local;
  Verdict& out_verdict = verdict ? *verdict : local;
  Record r = Record::object();
  r["value"] = nullptr;  // first key, filled below
  r["scheme"] = scheme_name(config.scheme);

  if (!record.contains("check") || record["check"].is_null())
    throw FieldError("check", "missing (run kernel-check before reward-calc)");
  if (!record["check"].is_object()) throw FieldError("check", std::string("expected an object, got ") + record["check"].type_name());
  auto status = get_optional<std::string>(record, "/check/status");
  auto correct = get_optional<bool>(record, "/check/correct");
  auto check_reason = get_optional<std::string>(record, "/check/reason");
  if (status) r["check_status"] = *status;
  std::string because = check_reason ? ": " + *check_reason : "";

  // 1. Verdicts against the candidate: every scheme gives them a fixed value.
  if (status && *status == "policy_violation") {
    r["value"] = number(config.violation_penalty);
    r["reason"] = "policy violation" + because;
    out_verdict = Verdict::scored_violation;
    return r;
  }
  if ((correct && !*correct) || (status && is_failure_status(*status))) {
    r["value"] = number(config.failure_value);
    r["reason"] = "check failed (" + (status ? *status : std::string("correct = false")) + ")" + because;
    out_verdict = Verdict::scored_failed;
    return r;
  }
  if (!correct)
    throw FieldError("check.correct", status ? "missing: the candidate was not judged (check.status '" + *status + "')"
                                             : std::string("missing"));
  if (status && *status != "passed")
    throw FieldError("check.status", "'" + *status + "' contradicts check.correct = true");

  // 2. Correct: the score depends on the times.
  const bool has_prof = record.contains("prof") && !record["prof"].is_null();
  if (!has_prof) {
    if (!config.allow_unprofiled)
      throw FieldError("prof", "missing: the check passed but the candidate was not profiled "
                               "(run kernel-prof, or pass --allow-unprofiled to score it as correct and not faster)");
    // Correct and not faster: milestone 1, speedup 1.0 (t_base/t taken as 1), log-speedup 0.
    double v = config.scheme == Scheme::milestone ? 1.0 : config.scheme == Scheme::speedup ? 1.0 : 0.0;
    r["value"] = number(v);
    r["reason"] = "correct, not profiled (--allow-unprofiled): scored as not faster";
    r["unprofiled"] = true;
    out_verdict = Verdict::unprofiled;
    return r;
  }
  if (!record["prof"].is_object()) throw FieldError("prof", std::string("expected an object, got ") + record["prof"].type_name());
  // Outputs of the timed calls are checked too (DESIGN.md §6): right when checked, wrong when timed.
  auto prof_correct = get_optional<bool>(record, "/prof/correct");
  auto prof_status = get_optional<std::string>(record, "/prof/status");
  if ((prof_correct && !*prof_correct) || (prof_status && *prof_status == "failed")) {
    auto prof_reason = get_optional<std::string>(record, "/prof/reason");
    r["value"] = number(config.failure_value);
    r["reason"] = "outputs of the timed calls were wrong" + (prof_reason ? ": " + *prof_reason : std::string());
    out_verdict = Verdict::scored_failed;
    return r;
  }

  const double t = required_time(record, "/prof/time_us", " (kernel-prof gives the candidate's time there)");
  // Which compile baseline: the plain one, or the one timed with the candidate's precision allowed
  // (kernel-prof times it only when the kernel used tf32/fp16/bf16; otherwise plain is the match).
  std::string compile_key = "compile";
  if (config.compile_baseline == CompileBaseline::precision_matched) {
    for (const char* key : kMatchedCompileKeys)
      if (record.contains(Record::json_pointer("/prof/baselines/" + std::string(key)))) {
        compile_key = key;
        break;
      }
  }
  const bool milestone = config.scheme == Scheme::milestone;
  const bool need_eager = milestone || config.speedup_baseline == SpeedupBaseline::eager;
  const bool need_compile = milestone || config.speedup_baseline == SpeedupBaseline::compile;
  const std::string hint = " (kernel-prof --baselines eager,compile times it)";
  std::optional<double> te = need_eager ? required_time(record, "/prof/baselines/eager/time_us", hint)
                                        : optional_time(record, "/prof/baselines/eager/time_us");
  std::optional<double> tc = need_compile ? required_time(record, "/prof/baselines/" + compile_key + "/time_us", hint)
                                          : optional_time(record, "/prof/baselines/" + compile_key + "/time_us");

  r["time_us"] = t;
  if (te) {
    r["eager_time_us"] = *te;
    r["speedup_vs_eager"] = *te / t;
    r["gain_vs_eager"] = (*te - t) / *te;
  }
  if (tc) {
    r["compile_baseline"] = compile_key;
    r["compile_time_us"] = *tc;
    r["speedup_vs_compile"] = *tc / t;
    r["gain_vs_compile"] = (*tc - t) / *tc;
  }

  if (milestone) {
    // (t0 - t)/t0 > m, with the epsilon of kMarginEpsilon against decimal rounding.
    const double gain_e = (*te - t) / *te, gain_c = (*tc - t) / *tc;
    const bool beats_eager = gain_e > config.margin + kMarginEpsilon;
    const bool beats_compile = gain_c > config.margin + kMarginEpsilon;
    int v = beats_eager && beats_compile ? 3 : beats_eager ? 2 : 1;
    r["value"] = v;
    r["margin"] = config.margin;
    r["faster_than_eager"] = beats_eager;
    r["faster_than_compile"] = beats_compile;
    std::string m = fixed(config.margin * 100, "%g") + "%";
    r["reason"] = "correct; " + percent(gain_e) + " eager, " + percent(gain_c) + " " + compile_key +
                  (v == 3   ? " (more than " + m + " faster than both)"
                   : v == 2 ? " (more than " + m + " faster than eager only)"
                            : " (not more than " + m + " faster than eager)");
    out_verdict = Verdict::scored_correct;
    return r;
  }

  const bool vs_compile = config.speedup_baseline == SpeedupBaseline::compile;
  const double base = vs_compile ? *tc : *te;
  const std::string base_name = vs_compile ? compile_key : "eager";
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
  out_verdict = Verdict::scored_correct;
  return r;
}

}  // namespace ca::reward
