// kernel-prof's own options (the shared ones come from ca::Cli).
#pragma once
#include <string>
#include <vector>

#include "libcommon/bundle/rules.hpp"
#include "libcommon/cli.hpp"
#include "libcommon/measure/stop_rule.hpp"

namespace ca::kernel_prof {

struct ProfOptions {
  std::string metric = "device";                          // device | wall
  std::vector<std::string> baselines{"eager", "compile"};  // eager, compile, compile-max-autotune
  std::vector<int> gpus{0};
  std::size_t worker_memory_mb = 0;  // all reference workers together (one per GPU); 0: 3/4 of RAM, <= 16 GiB each
  bool one_task_per_worker = false;  // a service's --accept-tasks: a fresh worker process per task (clients' code)
  std::string tasks_path;                                 // --tasks FILE
  bool refresh = false;                                   // re-measure cached baselines
  bool metrics = false;                                   // --metrics: ncu counters and roofline
  bool no_cupti = false;
  int input_sets = 3;
  int warmup = 3;
  measure::StopRule stop;                                 // --min-runs --max-runs --rel-ci --budget-s
  double baseline_budget_s = 10;
  double lock_timeout_s = 600;
  // Noise: a "more than margin faster" verdict (reward-calc's milestone) that the CIs leave open is
  // measured again, up to this many more rounds of the candidate's timed calls.
  int remeasure = 2;
  double margin = 0.05;
  // Inputs of set k use seed + k. Drawn unpredictably per run unless --seed: a kernel cannot know
  // the timing inputs in advance; the seed is kept in the record's prof.method (and the store).
  uint64_t seed = 0;
  bool seed_given = false;                                // --seed: reproduce a run
  std::string replay_once;                                // hidden: ncu's one-shot target
  // The rules every candidate is held to again on the code this GPU loads (--rules, as kernel-check's):
  // a check run for another arch, or on a CPU node, never saw the branch `__CUDA_ARCH__` picks here.
  std::string rules_path;
  bundle::Rules rules;  // loaded by validate_and_load(); its identity() is in timed_by

  void register_with(CLI::App& app);
  // UsageError on bad combinations or a malformed --rules file; loads `rules` (the scratch cap left
  // out: it is kernel-check's GPU judge's, from its worker's measurement of the reference).
  void validate_and_load();
};

}  // namespace ca::kernel_prof
