// reward-calc's options and summary.
#include "tools/reward-calc/options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "libcommon/log.hpp"

namespace ca::reward_calc {

void add_options(CLI::App& app, Options& o) {
  Config& config = o.values;
  app.add_option("--config", o.config_path, "YAML file of settings (keys as the options, with _ for -); options win");
  o.scheme_opt = app.add_option("--scheme", o.scheme, "milestone | speedup (t_base/t) | log-speedup (clipped ln)")
                     ->capture_default_str();
  o.margin_opt = app.add_option("--margin", config.margin, "milestone: 'more than M faster' means (t0-t)/t0 > M")
                     ->capture_default_str();
  o.compile_opt = app.add_option("--compile-baseline", o.compile_baseline,
                                 "precision-matched: eager and compile timed with the kernel's precision allowed (TF32, "
                                 "autocast), where kernel-prof timed them so, or the fp32 ones where faster; plain: the fp32 "
                                 "baselines (both are in the record)")
                      ->capture_default_str();
  o.speedup_opt = app.add_option("--speedup-baseline", o.speedup_baseline, "speedup schemes: compile | eager")
                      ->capture_default_str();
  o.failure_opt = app.add_option("--failure-value", config.failure_value, "Reward of a failed check (every scheme)")
                      ->capture_default_str();
  o.violation_opt = app.add_option("--violation-penalty", config.violation_penalty,
                                   "Reward of a policy violation (check.status policy_violation)")
                        ->capture_default_str();
  o.clip_opt = app.add_option("--log-clip", config.log_clip, "log-speedup: clamp ln(t_base/t) to [-C, C]")
                   ->capture_default_str();
  o.unprofiled_opt = app.add_flag("--allow-unprofiled", config.allow_unprofiled,
                                  "Score a passed but unprofiled record as correct and not faster (milestone 1)");
}

Config settings(const Options& o) {
  Config config;
  if (!o.config_path.empty()) config.load_yaml(o.config_path);
  if (o.scheme_opt->count()) config.scheme = parse_scheme(o.scheme);
  if (o.margin_opt->count()) config.margin = o.values.margin;
  if (o.compile_opt->count()) config.compile_baseline = parse_compile_baseline(o.compile_baseline);
  if (o.speedup_opt->count()) config.speedup_baseline = parse_speedup_baseline(o.speedup_baseline);
  if (o.failure_opt->count()) config.failure_value = o.values.failure_value;
  if (o.violation_opt->count()) config.violation_penalty = o.values.violation_penalty;
  if (o.clip_opt->count()) config.log_clip = o.values.log_clip;
  if (o.unprofiled_opt->count()) config.allow_unprofiled = true;
  config.validate();
  return config;
}

void Tally::add(double v, const std::string& value_text, Verdict verdict) {
  ++histogram_[value_text];
  lowest_ = scored_ ? std::min(lowest_, v) : v;
  highest_ = scored_ ? std::max(highest_, v) : v;
  sum_ += v;
  ++scored_;
  if (verdict == Verdict::scored_violation) ++violations_;
  if (verdict == Verdict::unprofiled) ++unprofiled_;
}

std::string Tally::text(const Config& config) const {
  std::string values = "none";
  if (scored_ && histogram_.size() <= 6) {
    values.clear();
    for (const auto& [value, n] : histogram_) values += (values.empty() ? "" : ", ") + value + " x" + std::to_string(n);
  } else if (scored_) {
    values = log::cat("min ", lowest_, ", max ", highest_);
  }
  return log::cat("rewards (", scheme_name(config.scheme), "): ", values, scored_ ? log::cat("; mean ", sum_ / scored_) : "",
                  "; ", violations_, " policy violations, ", unprofiled_, " unprofiled");
}

}  // namespace ca::reward_calc
