// reward-calc: add the RL reward to checked and profiled candidate records (DESIGN.md §7).
#include <algorithm>
#include <map>
#include <memory>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"
#include "tools/reward-calc/scheme.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("reward-calc",
              "Score candidate records: add a `reward` section from their `check` and `prof` sections.\n"
              "Default: the published milestone reward: -1 if the check failed, 3 if more than 5% faster\n"
              "than both eager and torch.compile, 2 if more than 5% faster than eager, 1 otherwise.",
              "kernel-check < cands.jsonl | kernel-prof | reward-calc --store run.db > rewarded.jsonl",
              "kernel-check(1), kernel-prof(1), run-store(1), ppo-step(1)");
  auto& app = cli.app();
  auto& opt = cli.options();
  cli.add_io_options();
  cli.add_store_options();
  cli.add_record_options();

  std::string config_path, scheme = "milestone", compile_baseline = "precision-matched", speedup_baseline = "compile";
  ca::reward::Config config;
  app.add_option("--config", config_path, "YAML file of settings (keys as the options, with _ for -); options win");
  auto* o_scheme = app.add_option("--scheme", scheme, "milestone | speedup (t_base/t) | log-speedup (clipped ln)")
                       ->capture_default_str();
  auto* o_margin = app.add_option("--margin", config.margin, "milestone: 'more than M faster' means (t0-t)/t0 > M")
                       ->capture_default_str();
  auto* o_compile = app.add_option("--compile-baseline", compile_baseline,
                                   "precision-matched: eager and compile timed with the kernel's precision allowed (TF32, "
                                   "autocast), where kernel-prof timed them so; plain: the fp32 baselines (both are in the record)")
                        ->capture_default_str();
  auto* o_speedup = app.add_option("--speedup-baseline", speedup_baseline, "speedup schemes: compile | eager")
                        ->capture_default_str();
  auto* o_fail = app.add_option("--failure-value", config.failure_value, "Reward of a failed check (every scheme)")
                     ->capture_default_str();
  auto* o_violation = app.add_option("--violation-penalty", config.violation_penalty,
                                     "Reward of a policy violation (check.status policy_violation)")
                          ->capture_default_str();
  auto* o_clip = app.add_option("--log-clip", config.log_clip, "log-speedup: clamp ln(t_base/t) to [-C, C]")
                     ->capture_default_str();
  auto* o_unprof = app.add_flag("--allow-unprofiled", config.allow_unprofiled,
                                "Score a passed but unprofiled record as correct and not faster (milestone 1)");

  return cli.run(argc, argv, [&]() -> int {
    if (opt.resume) ca::log::warn("--resume does nothing for reward-calc: a reward is computed again in microseconds");
    // Settings: defaults, then the YAML file, then the options given on the command line.
    ca::reward::Config cli_values = config;
    config = ca::reward::Config{};
    if (!config_path.empty()) config.load_yaml(config_path);
    if (o_scheme->count()) config.scheme = ca::reward::parse_scheme(scheme);
    if (o_margin->count()) config.margin = cli_values.margin;
    if (o_compile->count()) config.compile_baseline = ca::reward::parse_compile_baseline(compile_baseline);
    if (o_speedup->count()) config.speedup_baseline = ca::reward::parse_speedup_baseline(speedup_baseline);
    if (o_fail->count()) config.failure_value = cli_values.failure_value;
    if (o_violation->count()) config.violation_penalty = cli_values.violation_penalty;
    if (o_clip->count()) config.log_clip = cli_values.log_clip;
    if (o_unprof->count()) config.allow_unprofiled = true;
    config.validate();
    ca::log::verbose("settings: ", config.to_json().dump());

    std::unique_ptr<ca::Store> store = ca::open_store_for(opt);
    ca::RecordLoop loop(opt);
    std::map<std::string, int64_t> histogram;  // reward value -> count, for the summary
    double sum = 0, lowest = 0, highest = 0;
    int64_t scored = 0, violations = 0, unprofiled = 0;
    int status = ca::kExitOk;
    try {
      status = loop.run([&](ca::Record& record) {
        // A record an earlier tool already marked bad, and never checked, is passed on as it came.
        if (record.contains("error") && !record.contains("check")) return ca::Outcome::passed;
        std::string candidate_id, task_id;
        if (store) {
          candidate_id = ca::get_required<std::string>(record, "/candidate_id");
          task_id = ca::get_optional<std::string>(record, "/task_id").value_or("");
        }
        ca::reward::Verdict verdict;
        ca::Record reward;
        try {
          reward = ca::reward::score(record, config, &verdict);
        } catch (const ca::FieldError& e) {
          // An earlier tool already marked this record bad: keep its error (the first cause), pass on.
          if (record.contains("error") && !opt.strict) {
            ca::log::verbose("record ", ca::record_key(record), ": ", e.what(), " (already has an error section)");
            return ca::Outcome::passed;
          }
          throw;
        }
        if (store) store->put_reward(candidate_id, task_id, reward);
        double v = reward["value"].get<double>();
        ++histogram[reward["value"].dump()];
        lowest = scored ? std::min(lowest, v) : v;
        highest = scored ? std::max(highest, v) : v;
        sum += v;
        ++scored;
        if (verdict == ca::reward::Verdict::scored_violation) ++violations;
        if (verdict == ca::reward::Verdict::unprofiled) ++unprofiled;
        record["reward"] = std::move(reward);
        return verdict == ca::reward::Verdict::scored_correct || verdict == ca::reward::Verdict::unprofiled
                   ? ca::Outcome::done
                   : ca::Outcome::failed;
      });
    } catch (const ca::Error& e) {
      ca::report_error(e);
      status = e.exit_code;
    }
    // Counts per value when the scheme has few values (milestone), else the range.
    std::string values = "none";
    if (scored && histogram.size() <= 6) {
      values.clear();
      for (const auto& [value, n] : histogram) values += (values.empty() ? "" : ", ") + value + " x" + std::to_string(n);
    } else if (scored) {
      values = ca::log::cat("min ", lowest, ", max ", highest);
    }
    ca::log::info("rewards (", ca::reward::scheme_name(config.scheme), "): ", values,
                  scored ? ca::log::cat("; mean ", sum / scored) : "", "; ", violations, " policy violations, ",
                  unprofiled, " unprofiled");
    if (store) {
      ca::Json counts = loop.counts().to_json();
      counts["settings"] = config.to_json();
      store->end_run(status, counts);
    }
    return status;
  });
}
