// run-store report: the per-level results a researcher compares (pass rate, faster than eager and
// torch.compile, geomean speedups, KernelBench's fast_p, mean reward), from one or more stores.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::run_store {

// Which of a task's candidates speaks for it. final: the episode's submitted candidate (the newest
// episode), else the newest candidate row, else the newest check. best: of the candidates that
// passed, the one with the highest speedup over torch.compile (then over eager, then the newest);
// the final one when none passed.
enum class Select { final, best };
Select parse_select(const std::string& text);  // throws UsageError
const char* select_name(Select s);

// What the report knows of one task, by its selected candidate.
struct TaskResult {
  std::string task_id, name, level, candidate_id;
  int candidates = 0;
  bool passed = false;  // the check passed and the timed calls (if any) were right
  // Speedups of a passed candidate (absent when not timed); _pm: against the precision-matched baselines.
  std::optional<double> vs_eager, vs_compile, vs_eager_pm, vs_compile_pm;
  std::optional<double> reward;
  std::optional<double> time_us, floor_us;  // floor: kernel-prof --metrics roofline floor_us
  std::string bound;                         // memory | compute, with the floor
};

// One reward-calc run (an iteration of the loop): its rewards' mean and how many of them passed.
struct Iteration {
  std::string run_id, tool, started_at;
  int rewards = 0;
  double pass_rate = 0, reward_mean = 0;
};

struct PpoStep {
  std::string run_id, mode;
  int64_t step = 0;
  std::optional<double> reward_mean;
  Json losses = Json::object();
};

struct Report {
  std::vector<std::string> stores;
  Select select = Select::final;
  std::vector<TaskResult> tasks;   // in level order, then task name
  Json levels = Json::array();  // one JSON row per level, then the "all" row
  std::vector<Iteration> iterations;  // in run order
  std::vector<PpoStep> ppo_steps;     // in run order, then step
  int64_t tasks_without_candidates = 0;
};

// Reads the stores (read-only) as one: a row whose key an earlier store already gave is skipped,
// as `run-store merge` would. A missing store is an EnvironmentError, a file that is not a run store
// an InputError.
Report build_report(const std::vector<std::string>& store_paths, Select select);

std::string render_table(const Report& report);
std::string render_html(const Report& report);  // report_html.cpp

// `run-store report`: the arguments as parsed, and the subcommand itself (stdout: the table on a
// terminal or with --table, else JSON Lines; --html also writes the page). Returns the exit code.
struct ReportCommand {
  std::vector<std::string> stores;
  std::string select = "final", html;
  bool json = false, table = false;
};
int run_report(const ReportCommand& command, const std::string& default_store);

// Shared by both renderings: "12.5%", "1.234", "-".
std::string format_rate(const Json& v);
std::string format_number(const Json& v, const char* format = "%.3f");

}  // namespace ca::run_store
