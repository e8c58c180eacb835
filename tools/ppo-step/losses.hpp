// The PPO loss terms per token, each with its derivative, as veRL's core_algos defines them: the clipped
// surrogate with clip-higher (eps_low / eps_high) and the optional dual clip, the clipped value loss,
// and the token-mean aggregation. The trainer calls the per-token forms; tests use the batch forms.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

namespace ca::ppo_step {

struct PolicyClip {
  double eps_low = 0.2;    // ratio floor 1 - eps_low (negative advantages)
  double eps_high = 0.28;  // ratio ceiling 1 + eps_high (positive advantages): clip-higher
  double dual_clip_c = 3.0;  // dual clip bound on -A * c for A < 0; <= 1 disables it
};

struct PolicyTokenLoss {
  double loss = 0;         // the surrogate for this token
  double dloss_dlogp = 0;  // its derivative in the new logprob
  double ratio = 1;
  bool clipped_high = false;  // A > 0 and the ratio was cut at 1 + eps_high
  bool clipped_low = false;   // A < 0 and the ratio was cut at 1 - eps_low
  bool dual_clipped = false;  // A < 0 and the loss was capped at -A * c
};

// ratio = exp(clamp(logp - old_logp, -20, 20));  l1 = -A ratio;  l2 = -A clamp(ratio, 1-eps_low, 1+eps_high);
// l = max(l1, l2); for A < 0 with dual clip: l = min(l, -A c).
PolicyTokenLoss policy_token_loss(double logp, double old_logp, double advantage, const PolicyClip& clip);

struct ValueTokenLoss {
  double loss = 0;      // 0.5 * max((v - R)^2, (clamp(v, v_old - c, v_old + c) - R)^2)
  double dloss_dv = 0;
  bool clipped = false;  // the clipped branch was the larger
};
// clip_range <= 0: no value clipping.
ValueTokenLoss value_token_loss(double v, double v_old, double ret, double clip_range);

// Batch forms over flat arrays of tokens with a mask, aggregated as a token mean (sum over masked
// tokens / their count). `grad` gets d(mean loss)/d(input) per token (0 on masked-out tokens).
struct PolicyLossSummary {
  double pg_loss = 0, clipfrac_high = 0, clipfrac_low = 0, clipfrac_dual = 0, approx_kl = 0;
  std::vector<double> grad;
};
PolicyLossSummary policy_loss(const std::vector<double>& logp, const std::vector<double>& old_logp,
                              const std::vector<double>& advantages, const std::vector<double>& mask,
                              const PolicyClip& clip);
struct ValueLossSummary {
  double vf_loss = 0, vf_clipfrac = 0;
  std::vector<double> grad;
};
ValueLossSummary value_loss(const std::vector<double>& values, const std::vector<double>& old_values,
                            const std::vector<double>& returns, const std::vector<double>& mask, double clip_range);
double token_mean(const std::vector<double>& x, const std::vector<double>& mask);

// How far the trainer's logprobs of the sampled tokens are from the ones the rollout recorded, over
// the tokens added: |lp_train - lp_rollout| (mean, max), |p_train - p_rollout| (mean: veRL's
// training/rollout_probs_diff_mean) and the importance ratio exp(clamp(lp_train - lp_rollout, +-20))
// as the loss computes it (mean, population std, min, max, fraction outside [1 - eps_low, 1 + eps_high]).
struct RolloutMismatch {
  int64_t tokens = 0;
  double abs_sum = 0, abs_max = 0, prob_abs_sum = 0;
  double ratio_mean = 0, ratio_m2 = 0;  // Welford's running mean and sum of squared deviations
  double ratio_min = std::numeric_limits<double>::infinity(), ratio_max = -std::numeric_limits<double>::infinity();
  int64_t outside_clip = 0;
  // Both logprobs finite (the caller leaves out the rest).
  void add(double lp_train, double lp_rollout, const PolicyClip& clip);
  double abs_mean() const { return tokens ? abs_sum / double(tokens) : 0.0; }
  double ratio_std() const;
};

// 1 - Var(returns - values) / Var(returns) over masked tokens (unbiased variances); 0 when Var(returns) = 0.
double explained_variance(const std::vector<double>& returns, const std::vector<double>& values,
                          const std::vector<double>& mask);

}  // namespace ca::ppo_step
