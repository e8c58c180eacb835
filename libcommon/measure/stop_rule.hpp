// The adaptive stop rule of kernel-prof: time until the median is known to within a relative 95%
// CI (default 1%), or the per-candidate budget or the run cap is reached, never below min_runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::measure {

enum class StopReason { none, converged, budget, max_runs };
const char* stop_reason_name(StopReason r);

struct StopRule {
  int64_t min_runs = 10;     // at least this many timed calls (>= 6, or the CI is undefined)
  int64_t max_runs = 10000;  // never more
  double rel_ci = 0.01;      // stop once the median's relative 95% CI half-width is under this
  double budget_s = 10.0;    // wall seconds of timed calls (warm-up excluded) for one target
  Json to_json() const;
};

// Stateful: the CI is re-evaluated when the count has grown by 5% since the last check (each check
// sorts the samples), so the cost stays O(n log^2 n) for a long run.
class StopTracker {
 public:
  explicit StopTracker(StopRule rule) : rule_(rule) {}
  // Call after each new sample with the wall time spent so far.
  StopReason update(const std::vector<double>& samples, double elapsed_s);
  double last_rel_ci() const { return last_rel_ci_; }  // < 0 until a CI was defined
  const StopRule& rule() const { return rule_; }

 private:
  StopRule rule_;
  std::size_t next_check_ = 0;
  double last_rel_ci_ = -1;
};

}  // namespace ca::measure
