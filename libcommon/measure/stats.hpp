// Summary statistics of repeated timings: median, p10/p90, mean and the relative 95% confidence
// interval of the median, distribution-free (order statistics), as kernel-prof reports them.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::measure {

// The 95% CI of the median from order statistics: for n sorted samples x(1) <= ... <= x(n), the
// interval [x(j), x(n+1-j)] covers the true median with probability 1 - 2 P(B <= j-1), B ~ Bin(n, 1/2),
// whatever the distribution of the samples (no normality assumed: timings are skewed, with a tail).
// j is the largest rank with coverage >= 95%. Below n = 6 no such j exists (n = 5 gives 93.75%).
struct MedianCi {
  int lower_rank = 0, upper_rank = 0;  // 1-based ranks j and n+1-j; 0 when undefined
  double lower = 0, upper = 0;
  bool defined() const { return lower_rank > 0; }
};
// Ranks only (depend on n alone; cached for speed by callers that loop).
MedianCi median_ci_ranks(int64_t n, double confidence = 0.95);
MedianCi median_ci(const std::vector<double>& sorted, double confidence = 0.95);

struct Summary {
  int64_t n = 0;
  double median = 0, p10 = 0, p90 = 0, mean = 0, min = 0, max = 0, stddev = 0;
  // Half-width of the 95% CI of the median over the median: max(median - lo, hi - median) / median.
  // Absent when n < 6 or the median is not positive.
  std::optional<double> rel_ci;
  Json to_json() const;  // {median, p10, p90, mean, n, rel_ci, min, max}
  static Summary from_json(const Json& j);  // inverse of to_json (missing fields stay 0 / absent)
};

// Linear interpolation between closest ranks (numpy's default), q in [0, 1]; `sorted` ascending.
double quantile_sorted(const std::vector<double>& sorted, double q);
Summary summarize(std::vector<double> samples);

// "More than m faster than t0" decided with both medians' confidence intervals: the gain 1 - t/t0,
// and its range when t and t0 move within their relative CIs. `ambiguous` when m lies in that range:
// the verdict could go either way on another measurement, so it is measured again before it counts.
struct MarginDecision {
  double gain = 0, gain_low = 0, gain_high = 0;
  bool beats = false;     // gain > m (as reward-calc decides it)
  bool ambiguous = false;
  Json to_json() const;
};
// rel_ci: Summary::rel_ci of each side (absent: taken as 0, the interval is then the point).
MarginDecision decide_margin(double t, std::optional<double> t_rel_ci, double t0, std::optional<double> t0_rel_ci,
                             double margin);

}  // namespace ca::measure
