// Sizing for a GPU: the GPU profiles' peaks, the roofline estimate of eager time, and the batch scaled
// toward a target time (chains and modules alike).
#include <algorithm>

#include "tools/ops-synth/generate.hpp"
#include "tools/ops-synth/generate_detail.hpp"
#include "tools/ops-synth/rng.hpp"

namespace ca::ops_synth {

using detail::kMaxBatch;
using detail::kTargetsMs;
using detail::numel_of;

namespace {

const std::vector<GpuProfile>& gpu_profiles() {
  // fp32 CUDA-core peaks (TF32 off) and HBM bandwidth, from the vendors' data sheets.
  static const std::vector<GpuProfile> profiles = {
      {"h20", 44e12, 4.0e12},   {"h100", 67e12, 3.35e12}, {"h200", 67e12, 4.8e12},
      {"a100", 19.5e12, 2.0e12}, {"l40s", 91.6e12, 0.864e12}, {"b200", 80e12, 8.0e12},
  };
  return profiles;
}

}  // namespace

const GpuProfile* find_gpu_profile(const std::string& name) {
  for (const auto& p : gpu_profiles())
    if (p.name == name) return &p;
  return nullptr;
}

std::string gpu_profile_names() {
  std::string out;
  for (const auto& p : gpu_profiles()) out += (out.empty() ? "" : "|") + p.name;
  return out;
}

double Generator::estimate_ms(int64_t flops, int64_t bytes, int n_ops) const {
  // Roofline with typical eager efficiencies (half of fp32 peak, 70% of bandwidth) and a launch
  // overhead per op; a ranking guess, not a measurement: the filter measures the real time.
  double compute_s = static_cast<double>(flops) / (gpu_->fp32_flops * 0.5);
  double memory_s = static_cast<double>(bytes) / (gpu_->bytes_per_s * 0.7);
  return (std::max(compute_s, memory_s) + 8e-6 * n_ops) * 1e3;
}

bool Generator::fits(const std::vector<Applied>& steps, double& est_ms) const {
  int64_t flops = 0, bytes = 0;
  double ms = 0;
  for (const auto& s : steps) {
    flops += s.flops;
    bytes += s.bytes;
    ms += estimate_ms(s.flops, s.bytes, 1);
    for (const auto& x : s.extras)
      if (profile_->max_numel && numel_of(x) > profile_->max_numel) return false;
  }
  if (profile_->max_flops && flops > profile_->max_flops) return false;
  est_ms = ms;
  return true;
}

bool Generator::size_for_gpu(Built& b, Rng& rng) {
  double target = kTargetsMs[rng.below(kTargetsMs.size())];
  target = std::min(std::max(target, opt_.min_ms * 1.5), opt_.max_ms / 1.5);
  double est = 0;
  if (!fits(b.steps, est)) return false;
  // Scale the batch dimension toward the target; every shape and the estimate follow it.
  for (int it = 0; it < 24; ++it) {
    Shape s = b.start;
    if (est < target / 1.41 && s[0] * 2 <= kMaxBatch) s[0] *= 2;
    else if (est > target * 1.41 && s[0] > 1) s[0] = std::max<int64_t>(1, s[0] / 2);
    else break;
    std::vector<Applied> steps;
    double e2 = 0;
    if (!propagate(b.chain, s, steps) || !fits(steps, e2)) break;
    b.start = s;
    b.steps = std::move(steps);
    est = e2;
  }
  b.est_ms = est;
  return est >= opt_.min_ms && est <= opt_.max_ms;
}

bool Generator::size_module(Built& b, double target) const {
  if (opt_.sizes != "gpu") return true;
  const ModuleSpec& m = *b.module;
  std::size_t batch = 0;
  for (; batch < m.constants.size() && m.constants[batch].name != "batch_size"; ++batch) {
  }
  if (batch < m.constants.size()) {
    for (int it = 0; it < 24; ++it) {
      auto c2 = b.consts;
      if (b.est_ms < target / 1.41 && c2[batch] * 2 <= kMaxBatch) c2[batch] *= 2;
      else if (b.est_ms > target * 1.41 && c2[batch] > 1) c2[batch] /= 2;
      else break;
      Built trial = b;
      if (!evaluate_module(m, c2, trial)) break;
      b = std::move(trial);
    }
  }
  return b.est_ms >= opt_.min_ms && b.est_ms <= opt_.max_ms;
}

}  // namespace ca::ops_synth
