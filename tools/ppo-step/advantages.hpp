// Advantage estimators and their helpers, with veRL's conventions (core_algos): GAE over response tokens
// where masked (tool) tokens pass V and A through, returns = A + V before whitening, whitening over
// masked tokens, GRPO's group-normalized outcome advantages, and the KL estimators.
#pragma once
#include <string>
#include <vector>

namespace ca::ppo_step {

// One response: per-token arrays of equal length (response tokens only; the prompt is not in them).
struct Sequence {
  std::string id;
  std::string group;                 // GRPO groups responses to the same prompt
  std::vector<double> mask;          // 1 = model token (trained), 0 = tool / observation token
  std::vector<double> values;        // critic values V(s_t), one per token (GAE only)
  std::vector<double> token_rewards; // reward per token (the outcome reward sits on the last model token)
  std::vector<double> advantages;    // out
  std::vector<double> returns;       // out
};

// Index of the last token with mask 1, or -1.
int last_model_token(const std::vector<double>& mask);
// token_rewards with `reward` on the last model token (zeros elsewhere).
std::vector<double> outcome_token_rewards(const std::vector<double>& mask, double reward);

// GAE for one sequence, without whitening (veRL's loop: masked tokens carry next-value and the running
// advantage through unchanged). Fills advantages and returns = advantages + values.
void gae(Sequence& s, double gamma, double lam);
// GRPO: score = sum of token rewards; per group (mean, unbiased std; a group of one: mean 0, std 1);
// advantage = (score - mean) / (std + eps) on every model token (or score - mean when !norm_by_std);
// returns = advantages.
void grpo(std::vector<Sequence>& batch, double eps = 1e-6, bool norm_by_std = true);

// Masked mean and unbiased masked variance over all tokens of all sequences (veRL's masked_var).
double masked_mean(const std::vector<const std::vector<double>*>& xs, const std::vector<const std::vector<double>*>& masks);
double masked_var(const std::vector<const std::vector<double>*>& xs, const std::vector<const std::vector<double>*>& masks);
// (x - mean) / sqrt(var + 1e-8) over the batch's masked tokens, applied to every token (veRL's masked_whiten).
void whiten_advantages(std::vector<Sequence>& batch);

// Runs an estimator over a batch: "gae" (per sequence, then whitening unless !whiten) or "grpo".
void compute_advantages(std::vector<Sequence>& batch, const std::string& estimator, double gamma, double lam,
                        bool whiten, bool grpo_norm_by_std = true);

// KL estimators between the policy and the reference for one token (veRL's kl_penalty):
// "k1" (kl): logp - ref;  "abs": |logp - ref|;  "k2" (mse): 0.5 (logp - ref)^2;
// "k3" (low_var_kl): e^(ref - logp) - (ref - logp) - 1, the difference clamped to +-20, result to +-10.
double kl_estimate(double logp, double ref_logp, const std::string& kind);
// d kl_estimate / d logp (0 where a clamp is active).
double kl_estimate_grad(double logp, double ref_logp, const std::string& kind);
bool is_kl_kind(const std::string& kind);

}  // namespace ca::ppo_step
