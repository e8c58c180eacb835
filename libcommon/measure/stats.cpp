// Statistics of repeated timings (see stats.hpp for the CI's definition).
#include "libcommon/measure/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ca::measure {

namespace {
// log P(B = k) for B ~ Bin(n, 1/2).
double log_binom_half(int64_t n, int64_t k) {
  return std::lgamma(double(n) + 1) - std::lgamma(double(k) + 1) - std::lgamma(double(n - k) + 1) -
         double(n) * std::log(2.0);
}
}  // namespace

MedianCi median_ci_ranks(int64_t n, double confidence) {
  MedianCi ci;
  if (n < 1) return ci;
  const double alpha_half = (1.0 - confidence) / 2.0;
  // Walk j up while the lower tail P(B <= j-1) stays within alpha/2; the tail grows with j.
  double tail = 0;  // P(B <= j-1)
  int64_t best = 0;
  for (int64_t j = 1; j <= (n + 1) / 2; ++j) {
    tail += std::exp(log_binom_half(n, j - 1));
    if (tail > alpha_half + 1e-12) break;
    best = j;
  }
  if (best == 0) return ci;
  ci.lower_rank = int(best);
  ci.upper_rank = int(n + 1 - best);
  return ci;
}

MedianCi median_ci(const std::vector<double>& sorted, double confidence) {
  MedianCi ci = median_ci_ranks(int64_t(sorted.size()), confidence);
  if (ci.defined()) {
    ci.lower = sorted[ci.lower_rank - 1];
    ci.upper = sorted[ci.upper_rank - 1];
  }
  return ci;
}

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * double(sorted.size() - 1);
  const auto lo = std::size_t(std::floor(pos));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - double(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary summarize(std::vector<double> samples) {
  Summary s;
  s.n = int64_t(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.median = quantile_sorted(samples, 0.5);
  s.p10 = quantile_sorted(samples, 0.1);
  s.p90 = quantile_sorted(samples, 0.9);
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / double(s.n);
  double ss = 0;
  for (double x : samples) ss += (x - s.mean) * (x - s.mean);
  s.stddev = s.n > 1 ? std::sqrt(ss / double(s.n - 1)) : 0.0;
  const MedianCi ci = median_ci(samples);
  if (ci.defined() && s.median > 0) s.rel_ci = std::max(s.median - ci.lower, ci.upper - s.median) / s.median;
  return s;
}

Json Summary::to_json() const {
  Json j{{"median", median}, {"p10", p10}, {"p90", p90}, {"mean", mean}, {"n", n}};
  j["rel_ci"] = rel_ci ? Json(*rel_ci) : Json(nullptr);
  j["min"] = min;
  j["max"] = max;
  return j;
}

Summary Summary::from_json(const Json& j) {
  Summary s;
  auto num = [&](const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0; };
  s.median = num("median");
  s.p10 = num("p10");
  s.p90 = num("p90");
  s.mean = num("mean");
  s.min = num("min");
  s.max = num("max");
  s.n = j.contains("n") && j["n"].is_number() ? j["n"].get<int64_t>() : 0;
  if (j.contains("rel_ci") && j["rel_ci"].is_number()) s.rel_ci = j["rel_ci"].get<double>();
  return s;
}

Json MarginDecision::to_json() const {
  return Json{{"gain", gain}, {"gain_low", gain_low}, {"gain_high", gain_high}, {"beats", beats}, {"ambiguous", ambiguous}};
}

MarginDecision decide_margin(double t, std::optional<double> t_rel_ci, double t0, std::optional<double> t0_rel_ci,
                             double margin) {
  MarginDecision d;
  const double a = std::max(0.0, t_rel_ci.value_or(0.0)), b = std::min(0.999, std::max(0.0, t0_rel_ci.value_or(0.0)));
  d.gain = 1.0 - t / t0;
  d.gain_low = 1.0 - t * (1 + a) / (t0 * (1 - b));
  d.gain_high = 1.0 - t * (1 - a) / (t0 * (1 + b));
  d.beats = d.gain > margin;
  d.ambiguous = d.gain_low <= margin && margin < d.gain_high;
  return d;
}

}  // namespace ca::measure
