// kernel-prof options.
#include "tools/kernel-prof/options.hpp"

#include <CLI/CLI.hpp>

#include "libcommon/errors.hpp"

namespace ca::kernel_prof {

void ProfOptions::register_with(CLI::App& app) {
  app.add_option("--metric", metric,
                 "What time_us and the speedups compare: 'device' = the time per call at least one of its kernels "
                 "ran, from CUPTI (the published profiler's kernel sum when no two overlap; baselines: the same "
                 "from torch.profiler), 'wall' = CUDA events "
                 "around each call (the candidate's graph replay; eager's includes its Python launch overhead)")
      ->check(CLI::IsMember({"device", "wall"}))
      ->capture_default_str();
  app.add_option("--baselines", baselines,
                 "Comma-separated baselines timed by the reference worker with the same method: eager, compile, "
                 "compile-max-autotune (cached in the store by task, GPU, driver, torch version and method)")
      ->delimiter(',')
      ->check(CLI::IsMember({"eager", "compile", "compile-max-autotune"}))
      ->capture_default_str();
  app.add_option("--gpus", gpus,
                 "Comma-separated GPU ordinals; with several, candidates are spread over them (one child per GPU, "
                 "output in input order); each GPU is locked while timed (CUDA_AGENT_LOCK_DIR)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--worker-memory", worker_memory_mb, "Memory in MiB all reference workers together may hold (one per GPU; each gets its share: resident sets of its processes and the files it writes); 0: three quarters of this host's, at most 16 GiB each")->capture_default_str();
  app.add_option("--tasks", tasks_path, "Tasks (JSON Lines) to find each record's task by task_id; else the record's "
                                        "`task` object, else the store");
  app.add_flag("--refresh", refresh, "Measure baselines again even when the store has them");
  app.add_flag("--metrics", metrics,
               "Per kernel: DRAM and SM throughput (% of peak) and achieved occupancy through ncu, and the roofline "
               "position from the task's FLOP and byte estimates");
  app.add_flag("--no-cupti", no_cupti, "Do not trace with CUPTI (device time then falls back to CUDA events)");
  app.add_option("--input-sets", input_sets, "Input sets rotated between the baselines' calls (the candidate gets a fresh set every call)")->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed calls before timing")->check(CLI::Range(0, 10000))->capture_default_str();
  app.add_option("--min-runs", stop.min_runs, "Fewest timed calls (the median's 95% CI needs 6)")
      ->check(CLI::Range(6, 1000000))
      ->capture_default_str();
  app.add_option("--max-runs", stop.max_runs, "Most timed calls")->check(CLI::Range(6, 10000000))->capture_default_str();
  app.add_option("--rel-ci", stop.rel_ci, "Stop once the relative 95% CI half-width of the median is below this")
      ->check(CLI::Range(1e-5, 1.0))
      ->capture_default_str();
  app.add_option("--budget-s", stop.budget_s, "Seconds of timed calls per candidate before stopping anyway")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--baseline-budget-s", baseline_budget_s, "The same budget for each baseline")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--remeasure", remeasure,
                 "Rounds of timed calls added when a speedup's margin decision (--margin, reward-calc's milestone "
                 "threshold) lies inside the measured intervals")
      ->check(CLI::Range(0, 20))
      ->capture_default_str();
  app.add_option("--margin", margin, "The 'more than m faster' threshold the remeasuring watches (reward-calc --margin)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--rules,--policy", rules_path,
                 "Bundle rules YAML, applied again to the code this GPU loads (default: the shipped "
                 "datasets/skill/rules.yaml; give kernel-check's file)");
  app.add_option("--replay-once", replay_once, "Run one record's forward once per input set (ncu's target)")->group("");
  app.add_option("--lock-timeout-s", lock_timeout_s, "Wait at most this long for a GPU another job is timing on")
      ->capture_default_str();
}

void ProfOptions::validate_and_load() {
  if (stop.max_runs < stop.min_runs) throw UsageError("--max-runs must be >= --min-runs");
  if (gpus.empty()) throw UsageError("--gpus: need at least one ordinal");
  for (int g : gpus)
    if (g < 0) throw UsageError("--gpus: ordinals are >= 0");
  rules = bundle::Rules::load(rules_path);
  rules.scratch_cap_by_judge = true;
}

}  // namespace ca::kernel_prof
