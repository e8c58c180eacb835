// ppo-step's coefficients: defaults from the published recipe (DESIGN.md §9) and, where it is silent,
// veRL's; overridden by a YAML file (--config) whose unknown keys are errors, not silently ignored.
#pragma once
#include <cstdint>
#include <string>

#include "libcommon/jsonl.hpp"
#include "libcommon/nn/optim.hpp"
#include "tools/ppo-step/losses.hpp"

namespace ca::ppo_step {

struct KlConfig {
  bool in_reward = false;  // subtract coef * KL from the token rewards (veRL use_kl_in_reward)
  bool as_loss = false;    // add coef * KL to the actor loss (veRL use_kl_loss)
  std::string kind = "k3"; // k1 | abs | k2 | k3
  double coef = 0.001;
};

struct ModelTrainConfig {
  nn::AdamWConfig adamw;
  double grad_clip = 1.0;
  int epochs = 1;           // passes over the batch per ppo-step call
  int mini_batch_size = 0;  // sequences per optimizer step (gradients accumulated); 0 = the whole batch
};

struct TrainConfig {
  // algorithm
  std::string estimator = "gae";  // gae | grpo
  double gamma = 1.0;             // published: GAE gamma 1, lambda 0.95
  double lam = 0.95;
  bool whiten = true;             // whiten GAE advantages over masked tokens (veRL)
  bool grpo_norm_by_std = true;
  KlConfig kl;
  // actor
  ModelTrainConfig actor;
  PolicyClip clip;             // published clip-higher: eps_low 0.2, eps_high 0.28; dual clip c = 3 (veRL)
  double entropy_coeff = 0.0;  // veRL's default; > 0 adds an entropy bonus
  double temperature = 1.0;    // logits / temperature when computing logprobs (match the sampler)
  bool recompute_old_logprobs = false;  // ignore recorded logprobs and recompute them with --policy
  // ppo: the largest mean |logprob_trainer - logprob_rollout| over the assistant tokens with recorded
  // logprobs, under the policy as loaded, before a step stops (exit 2); 0 measures without a bound.
  double max_logprob_mismatch = 0.1;
  // critic
  ModelTrainConfig critic;
  double cliprange_value = 0.5;  // veRL's default; <= 0 disables value clipping
  // rft (rejection fine-tuning)
  ModelTrainConfig rft;
  double rft_min_reward = 0.0;       // keep trajectories with reward > this
  bool rft_require_clean_tools = true;  // and no tool turn marked as an error

  TrainConfig();
  // Applies a YAML document (sections algorithm, actor, critic, rft); throws UsageError naming an
  // unknown key or a bad value.
  void apply_yaml(const std::string& text, const std::string& where);
  void validate() const;
  Json to_json() const;
  static std::string default_yaml();  // the documented defaults, as `ppo-step config` prints them
};

}  // namespace ca::ppo_step
