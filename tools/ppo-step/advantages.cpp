// Advantage estimators: GAE with masked pass-through, GRPO, whitening, KL estimators.
#include "tools/ppo-step/advantages.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "libcommon/errors.hpp"

namespace ca::ppo_step {

int last_model_token(const std::vector<double>& mask) {
  for (int t = int(mask.size()) - 1; t >= 0; --t)
    if (mask[t] > 0) return t;
  return -1;
}

std::vector<double> outcome_token_rewards(const std::vector<double>& mask, double reward) {
  std::vector<double> r(mask.size(), 0.0);
  int last = last_model_token(mask);
  if (last >= 0) r[last] = reward;
  return r;
}

void gae(Sequence& s, double gamma, double lam) {
  const int n = int(s.mask.size());
  if (int(s.values.size()) != n || int(s.token_rewards.size()) != n)
    throw InputError("sequence '" + s.id + "': mask, values and token_rewards differ in length");
  s.advantages.assign(n, 0.0);
  s.returns.assign(n, 0.0);
  double next_value = 0, last_gae = 0;
  for (int t = n - 1; t >= 0; --t) {
    const double m = s.mask[t];
    const double delta = s.token_rewards[t] + gamma * next_value - s.values[t];
    const double gae_t = delta + gamma * lam * last_gae;
    // A tool token is not a decision: it neither bootstraps nor resets, it passes V and A through.
    next_value = s.values[t] * m + (1 - m) * next_value;
    last_gae = gae_t * m + (1 - m) * last_gae;
    s.advantages[t] = last_gae;
    s.returns[t] = last_gae + s.values[t];
  }
}

void grpo(std::vector<Sequence>& batch, double eps, bool norm_by_std) {
  std::vector<double> score(batch.size());
  std::map<std::string, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    for (double r : batch[i].token_rewards) score[i] += r;
    groups[batch[i].group].push_back(i);
  }
  for (auto& [name, members] : groups) {
    double mean = 0, std = 1;
    if (members.size() > 1) {
      for (auto i : members) mean += score[i];
      mean /= double(members.size());
      double ss = 0;
      for (auto i : members) ss += (score[i] - mean) * (score[i] - mean);
      std = std::sqrt(ss / double(members.size() - 1));
    } else {
      mean = 0;  // veRL: a lone response keeps its raw score
    }
    for (auto i : members) {
      double a = norm_by_std ? (score[i] - mean) / (std + eps) : score[i] - mean;
      Sequence& s = batch[i];
      s.advantages.assign(s.mask.size(), 0.0);
      for (std::size_t t = 0; t < s.mask.size(); ++t) s.advantages[t] = a * s.mask[t];
      s.returns = s.advantages;
    }
  }
}

double masked_mean(const std::vector<const std::vector<double>*>& xs, const std::vector<const std::vector<double>*>& masks) {
  double sum = 0, count = 0;
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (std::size_t t = 0; t < xs[i]->size(); ++t) {
      sum += (*xs[i])[t] * (*masks[i])[t];
      count += (*masks[i])[t];
    }
  return count > 0 ? sum / count : 0.0;
}

double masked_var(const std::vector<const std::vector<double>*>& xs, const std::vector<const std::vector<double>*>& masks) {
  const double mean = masked_mean(xs, masks);
  double ss = 0, count = 0;
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (std::size_t t = 0; t < xs[i]->size(); ++t) {
      double d = (*xs[i])[t] - mean;
      ss += d * d * (*masks[i])[t];
      count += (*masks[i])[t];
    }
  if (count < 2) return 0.0;
  return ss / count * count / (count - 1);  // Bessel's correction, as veRL's masked_var(unbiased=True)
}

void whiten_advantages(std::vector<Sequence>& batch) {
  std::vector<const std::vector<double>*> xs, ms;
  double count = 0;
  for (auto& s : batch) {
    xs.push_back(&s.advantages);
    ms.push_back(&s.mask);
    for (double m : s.mask) count += m;
  }
  if (count < 2) throw InputError("whitening needs at least two model tokens in the batch (use --no-whiten)");
  const double mean = masked_mean(xs, ms), var = masked_var(xs, ms);
  const double inv = 1.0 / std::sqrt(var + 1e-8);
  for (auto& s : batch)
    for (auto& a : s.advantages) a = (a - mean) * inv;
}

void compute_advantages(std::vector<Sequence>& batch, const std::string& estimator, double gamma, double lam, bool whiten,
                        bool grpo_norm_by_std) {
  if (estimator == "gae") {
    for (auto& s : batch) gae(s, gamma, lam);
    if (whiten && !batch.empty()) whiten_advantages(batch);
  } else if (estimator == "grpo") {
    grpo(batch, 1e-6, grpo_norm_by_std);
  } else {
    throw UsageError("unknown advantage estimator '" + estimator + "' (gae, grpo)");
  }
}

bool is_kl_kind(const std::string& kind) { return kind == "k1" || kind == "abs" || kind == "k2" || kind == "k3"; }

double kl_estimate(double logp, double ref, const std::string& kind) {
  if (kind == "k1") return logp - ref;
  if (kind == "abs") return std::fabs(logp - ref);
  if (kind == "k2") return 0.5 * (logp - ref) * (logp - ref);
  if (kind == "k3") {
    double kl = std::clamp(ref - logp, -20.0, 20.0);
    return std::clamp(std::exp(kl) - kl - 1.0, -10.0, 10.0);
  }
  throw UsageError("unknown KL estimator '" + kind + "' (k1, abs, k2, k3)");
}

double kl_estimate_grad(double logp, double ref, const std::string& kind) {
  if (kind == "k1") return 1.0;
  if (kind == "abs") return logp > ref ? 1.0 : logp < ref ? -1.0 : 0.0;
  if (kind == "k2") return logp - ref;
  if (kind == "k3") {
    double d = ref - logp;
    if (d < -20.0 || d > 20.0) return 0.0;
    double value = std::exp(d) - d - 1.0;
    if (value > 10.0 || value < -10.0) return 0.0;
    return 1.0 - std::exp(d);  // d/dlogp of e^d - d - 1 with d = ref - logp
  }
  throw UsageError("unknown KL estimator '" + kind + "' (k1, abs, k2, k3)");
}

}  // namespace ca::ppo_step
