// PPO loss terms.
#include "tools/ppo-step/losses.hpp"

#include <algorithm>
#include <cmath>

#include "libcommon/errors.hpp"
#include "tools/ppo-step/advantages.hpp"

namespace ca::ppo_step {

PolicyTokenLoss policy_token_loss(double logp, double old_logp, double A, const PolicyClip& clip) {
  PolicyTokenLoss r;
  const double diff = logp - old_logp;
  const bool diff_clamped = diff < -20.0 || diff > 20.0;
  r.ratio = std::exp(std::clamp(diff, -20.0, 20.0));
  const double dratio = diff_clamped ? 0.0 : r.ratio;  // d ratio / d logp
  const double l1 = -A * r.ratio;
  const double l2 = -A * std::clamp(r.ratio, 1.0 - clip.eps_low, 1.0 + clip.eps_high);
  // l2 > l1 only when the ratio left the trust region on the side the advantage pushes toward:
  // then the loss is flat in logp.
  double loss = l1, grad = -A * dratio;
  if (l2 > l1) {
    loss = l2;
    grad = 0;
    if (A > 0) r.clipped_high = true;
    if (A < 0) r.clipped_low = true;
  }
  if (A < 0 && clip.dual_clip_c > 1.0) {
    const double l3 = -A * clip.dual_clip_c;
    if (loss > l3) {
      loss = l3;
      grad = 0;
      r.dual_clipped = true;
    }
  }
  r.loss = loss;
  r.dloss_dlogp = grad;
  return r;
}

ValueTokenLoss value_token_loss(double v, double v_old, double ret, double clip_range) {
  ValueTokenLoss r;
  const double l1 = (v - ret) * (v - ret);
  if (clip_range <= 0) {
    r.loss = 0.5 * l1;
    r.dloss_dv = v - ret;
    return r;
  }
  const double vc = std::clamp(v, v_old - clip_range, v_old + clip_range);
  const double l2 = (vc - ret) * (vc - ret);
  if (l2 > l1) {  // only possible with v outside the range, where the clipped branch is flat in v
    r.loss = 0.5 * l2;
    r.dloss_dv = 0;
    r.clipped = true;
  } else {
    r.loss = 0.5 * l1;
    r.dloss_dv = v - ret;
  }
  return r;
}

double token_mean(const std::vector<double>& x, const std::vector<double>& mask) {
  double s = 0, n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    s += x[i] * mask[i];
    n += mask[i];
  }
  return n > 0 ? s / n : 0.0;
}

PolicyLossSummary policy_loss(const std::vector<double>& logp, const std::vector<double>& old_logp,
                              const std::vector<double>& adv, const std::vector<double>& mask, const PolicyClip& clip) {
  PolicyLossSummary s;
  s.grad.assign(logp.size(), 0.0);
  double n = 0;
  for (double m : mask) n += m;
  if (n == 0) return s;
  for (std::size_t i = 0; i < logp.size(); ++i) {
    if (mask[i] == 0) continue;
    auto t = policy_token_loss(logp[i], old_logp[i], adv[i], clip);
    s.pg_loss += mask[i] * t.loss / n;
    s.grad[i] = mask[i] * t.dloss_dlogp / n;
    s.clipfrac_high += mask[i] * t.clipped_high / n;
    s.clipfrac_low += mask[i] * t.clipped_low / n;
    s.clipfrac_dual += mask[i] * t.dual_clipped / n;
    s.approx_kl += mask[i] * (old_logp[i] - logp[i]) / n;
  }
  return s;
}

ValueLossSummary value_loss(const std::vector<double>& values, const std::vector<double>& old_values,
                            const std::vector<double>& returns, const std::vector<double>& mask, double clip_range) {
  ValueLossSummary s;
  s.grad.assign(values.size(), 0.0);
  double n = 0;
  for (double m : mask) n += m;
  if (n == 0) return s;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (mask[i] == 0) continue;
    auto t = value_token_loss(values[i], old_values[i], returns[i], clip_range);
    s.vf_loss += mask[i] * t.loss / n;
    s.grad[i] = mask[i] * t.dloss_dv / n;
    s.vf_clipfrac += mask[i] * t.clipped / n;
  }
  return s;
}

void RolloutMismatch::add(double lp_train, double lp_rollout, const PolicyClip& clip) {
  const double d = lp_train - lp_rollout, a = std::fabs(d);
  ++tokens;
  abs_sum += a;
  abs_max = std::max(abs_max, a);
  prob_abs_sum += std::fabs(std::exp(lp_train) - std::exp(lp_rollout));
  const double ratio = std::exp(std::clamp(d, -20.0, 20.0));
  const double delta = ratio - ratio_mean;
  ratio_mean += delta / double(tokens);
  ratio_m2 += delta * (ratio - ratio_mean);
  ratio_min = std::min(ratio_min, ratio);
  ratio_max = std::max(ratio_max, ratio);
  if (ratio < 1.0 - clip.eps_low || ratio > 1.0 + clip.eps_high) ++outside_clip;
}

double RolloutMismatch::ratio_std() const { return tokens ? std::sqrt(ratio_m2 / double(tokens)) : 0.0; }

double explained_variance(const std::vector<double>& returns, const std::vector<double>& values,
                          const std::vector<double>& mask) {
  std::vector<double> diff(returns.size());
  for (std::size_t i = 0; i < returns.size(); ++i) diff[i] = returns[i] - values[i];
  const double var_r = masked_var({&returns}, {&mask});
  if (var_r <= 0) return 0.0;
  return 1.0 - masked_var({&diff}, {&mask}) / var_r;
}

}  // namespace ca::ppo_step
