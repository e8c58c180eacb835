// The adaptive stop rule.
#include "libcommon/measure/stop_rule.hpp"

#include <algorithm>

#include "libcommon/measure/stats.hpp"

namespace ca::measure {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::none: return "none";
    case StopReason::converged: return "converged";
    case StopReason::budget: return "budget";
    case StopReason::max_runs: return "max_runs";
  }
  return "?";
}

Json StopRule::to_json() const {
  return Json{{"min_runs", min_runs}, {"max_runs", max_runs}, {"rel_ci", rel_ci}, {"budget_s", budget_s}};
}

StopReason StopTracker::update(const std::vector<double>& samples, double elapsed_s) {
  const auto n = int64_t(samples.size());
  if (n >= rule_.max_runs) return StopReason::max_runs;
  if (n < rule_.min_runs) return elapsed_s >= rule_.budget_s * 4 ? StopReason::budget : StopReason::none;
  if (samples.size() >= next_check_) {
    Summary s = summarize(samples);
    last_rel_ci_ = s.rel_ci ? *s.rel_ci : -1;
    next_check_ = samples.size() + std::max<std::size_t>(1, samples.size() / 20);
    if (s.rel_ci && *s.rel_ci < rule_.rel_ci) return StopReason::converged;
  }
  if (elapsed_s >= rule_.budget_s) return StopReason::budget;
  return StopReason::none;
}

}  // namespace ca::measure
