// ppo-step's YAML config: defaults, parsing with strict keys, and the record of what was used.
#include "tools/ppo-step/config.hpp"

#include <cmath>
#include <functional>
#include <map>

#include "libcommon/errors.hpp"
#include "libcommon/yaml.hpp"

namespace ca::ppo_step {

TrainConfig::TrainConfig() {
  actor.adamw.lr = 1e-6;  // veRL actor default
  critic.adamw.lr = 1e-5;  // veRL critic default
  rft.adamw.lr = 1e-5;
}

std::string TrainConfig::default_yaml() {
  return R"(# ppo-step configuration: every key with its default. Published values (DESIGN.md §9): GAE gamma 1,
# lambda 0.95; clip-higher eps_low 0.2 / eps_high 0.28; loss averaged over tokens; tool tokens masked.
# Where the recipe is silent the default is veRL's.
algorithm:
  estimator: gae            # gae | grpo
  gamma: 1.0
  lam: 0.95
  whiten_advantages: true   # GAE advantages whitened over model tokens of the batch
  grpo_norm_by_std: true    # GRPO: divide by the group's std (false: Dr. GRPO)
  kl_in_reward: false       # token rewards -= kl_coef * KL(policy || ref)  (needs --ref)
  kl_loss: false            # actor loss += kl_coef * KL                     (needs --ref)
  kl_kind: k3               # k1 | abs | k2 | k3 (low-variance)
  kl_coef: 0.001
actor:
  lr: 1.0e-6
  betas: [0.9, 0.999]
  eps: 1.0e-8
  weight_decay: 0.01
  grad_clip: 1.0            # global norm; 0 disables
  epochs: 1
  mini_batch_size: 0        # sequences per optimizer step; 0 = the whole batch
  clip_ratio_low: 0.2
  clip_ratio_high: 0.28
  dual_clip_c: 3.0          # <= 1 disables the dual clip
  entropy_coeff: 0.0
  temperature: 1.0
  recompute_old_logprobs: false
  # Before any update, every recorded logprob is compared with the trainer's under --policy as loaded
  # (metrics: rollout_mismatch). A step whose mean |logprob - recorded| over those tokens exceeds
  # this stops with exit 2 and writes nothing: the rollout sampled another policy (a server that did
  # not load the new weights or adapter) or at another temperature. 0 = report only. Loose on
  # purpose, for a bf16 sampler against this trainer: NeMo RL's tests bound the mean of exp|diff|
  # by 1.05 (a mean |diff| of about 0.05), its nightly runs the median by 1.1 (about 0.1).
  max_logprob_mismatch: 0.1
critic:
  lr: 1.0e-5
  betas: [0.9, 0.999]
  eps: 1.0e-8
  weight_decay: 0.01
  grad_clip: 1.0
  epochs: 1
  mini_batch_size: 0
  cliprange_value: 0.5      # <= 0 disables value clipping
rft:
  lr: 1.0e-5
  betas: [0.9, 0.999]
  eps: 1.0e-8
  weight_decay: 0.01
  grad_clip: 1.0
  epochs: 1
  mini_batch_size: 0
  min_reward: 0.0           # keep trajectories with reward > min_reward
  require_clean_tool_use: true
)";
}

namespace {
using Setter = std::function<void(const ca::Json&)>;

// A field read by YAML's rules (ca::yaml_double, ...): a bad value throws ca::YamlError.
template <class T> T yaml_as(const ca::Json& n);
// Every coefficient is finite: YAML's .nan and .inf read as numbers, and a .nan gamma, lam or lr
// passed every range check (a comparison with NaN is false) to fail only after a step's work.
double finite_double(const ca::Json& n) {
  const double v = ca::yaml_double(n);
  if (!std::isfinite(v)) throw ca::YamlError("not a finite number", "not a finite number");
  return v;
}
template <> double yaml_as<double>(const ca::Json& n) { return finite_double(n); }
template <> int yaml_as<int>(const ca::Json& n) { return ca::yaml_int(n); }
template <> bool yaml_as<bool>(const ca::Json& n) { return ca::yaml_bool(n); }
template <> std::string yaml_as<std::string>(const ca::Json& n) { return ca::yaml_string(n); }

template <class T> Setter set(T& field) {
  return [&field](const ca::Json& n) { field = yaml_as<T>(n); };
}

void add_model_keys(std::map<std::string, Setter>& keys, const std::string& section, ModelTrainConfig& m) {
  keys[section + ".lr"] = set(m.adamw.lr);
  keys[section + ".eps"] = set(m.adamw.eps);
  keys[section + ".weight_decay"] = set(m.adamw.weight_decay);
  keys[section + ".grad_clip"] = set(m.grad_clip);
  keys[section + ".epochs"] = set(m.epochs);
  keys[section + ".mini_batch_size"] = set(m.mini_batch_size);
  keys[section + ".betas"] = [&m](const ca::Json& n) {
    if (!n.is_array() || n.size() != 2) throw ca::YamlError("betas must be a list of two numbers", "betas must be a list of two numbers");
    m.adamw.beta1 = finite_double(n[0]);
    m.adamw.beta2 = finite_double(n[1]);
  };
}
}  // namespace

void TrainConfig::apply_yaml(const std::string& text, const std::string& where) {
  std::map<std::string, Setter> keys;
  keys["algorithm.estimator"] = set(estimator);
  keys["algorithm.gamma"] = set(gamma);
  keys["algorithm.lam"] = set(lam);
  keys["algorithm.whiten_advantages"] = set(whiten);
  keys["algorithm.grpo_norm_by_std"] = set(grpo_norm_by_std);
  keys["algorithm.kl_in_reward"] = set(kl.in_reward);
  keys["algorithm.kl_loss"] = set(kl.as_loss);
  keys["algorithm.kl_kind"] = set(kl.kind);
  keys["algorithm.kl_coef"] = set(kl.coef);
  add_model_keys(keys, "actor", actor);
  keys["actor.clip_ratio_low"] = set(clip.eps_low);
  keys["actor.clip_ratio_high"] = set(clip.eps_high);
  keys["actor.dual_clip_c"] = set(clip.dual_clip_c);
  keys["actor.entropy_coeff"] = set(entropy_coeff);
  keys["actor.temperature"] = set(temperature);
  keys["actor.recompute_old_logprobs"] = set(recompute_old_logprobs);
  keys["actor.max_logprob_mismatch"] = set(max_logprob_mismatch);
  add_model_keys(keys, "critic", critic);
  keys["critic.cliprange_value"] = set(cliprange_value);
  add_model_keys(keys, "rft", rft);
  keys["rft.min_reward"] = set(rft_min_reward);
  keys["rft.require_clean_tool_use"] = set(rft_require_clean_tools);

  ca::Json root;
  try {
    ca::YamlLimits limits;
    limits.kind = "config";
    root = ca::yaml_to_json(text, where, limits);
  } catch (const ca::YamlError& e) {
    throw UsageError(e.syntax ? where + ": not YAML: " + e.detail : std::string(e.what()));
  }
  if (root.is_null()) return;
  if (!root.is_object()) throw UsageError(where + ": expected a mapping of sections (algorithm, actor, critic, rft)");
  for (const std::string& name : ca::yaml_keys(root)) {
    const ca::Json& section = root[name];
    if (!section.is_object()) throw UsageError(where + ": section '" + name + "' must be a mapping");
    for (const std::string& field : ca::yaml_keys(section)) {
      std::string key = name + "." + field;
      auto it = keys.find(key);
      if (it == keys.end()) throw UsageError(where + ": unknown key '" + key + "' (ppo-step config lists them)");
      try {
        it->second(section[field]);
      } catch (const ca::YamlError& e) {
        throw UsageError(where + ": '" + key + "': bad value (" + e.detail + ")");
      }
    }
  }
  validate();
}

void TrainConfig::validate() const {
  if (estimator != "gae" && estimator != "grpo") throw UsageError("config: estimator must be gae or grpo");
  if (gamma < 0 || gamma > 1 || lam < 0 || lam > 1) throw UsageError("config: gamma and lam must be in [0, 1]");
  if (!(kl.kind == "k1" || kl.kind == "abs" || kl.kind == "k2" || kl.kind == "k3"))
    throw UsageError("config: kl_kind must be k1, abs, k2 or k3");
  if (clip.eps_low <= 0 || clip.eps_low >= 1 || clip.eps_high <= 0) throw UsageError("config: clip ratios must be in (0, 1)");
  if (temperature <= 0) throw UsageError("config: temperature must be positive");
  if (!(max_logprob_mismatch >= 0) || !std::isfinite(max_logprob_mismatch))
    throw UsageError("config: max_logprob_mismatch must be a finite number >= 0 (0: report only)");
  for (auto* m : {&actor, &critic, &rft}) {
    if (m->epochs < 1) throw UsageError("config: epochs must be at least 1");
    if (m->mini_batch_size < 0) throw UsageError("config: mini_batch_size must be >= 0");
    if (m->adamw.lr < 0) throw UsageError("config: lr must be >= 0");
  }
}

namespace {
Json model_json(const ModelTrainConfig& m) {
  return Json{{"lr", m.adamw.lr},       {"betas", {m.adamw.beta1, m.adamw.beta2}}, {"eps", m.adamw.eps},
              {"weight_decay", m.adamw.weight_decay}, {"grad_clip", m.grad_clip}, {"epochs", m.epochs},
              {"mini_batch_size", m.mini_batch_size}};
}
}  // namespace

Json TrainConfig::to_json() const {
  Json a = model_json(actor);
  a["clip_ratio_low"] = clip.eps_low;
  a["clip_ratio_high"] = clip.eps_high;
  a["dual_clip_c"] = clip.dual_clip_c;
  a["entropy_coeff"] = entropy_coeff;
  a["temperature"] = temperature;
  a["recompute_old_logprobs"] = recompute_old_logprobs;
  a["max_logprob_mismatch"] = max_logprob_mismatch;
  Json c = model_json(critic);
  c["cliprange_value"] = cliprange_value;
  Json r = model_json(rft);
  r["min_reward"] = rft_min_reward;
  r["require_clean_tool_use"] = rft_require_clean_tools;
  return Json{{"algorithm",
               {{"estimator", estimator}, {"gamma", gamma}, {"lam", lam}, {"whiten_advantages", whiten},
                {"grpo_norm_by_std", grpo_norm_by_std}, {"kl_in_reward", kl.in_reward}, {"kl_loss", kl.as_loss},
                {"kl_kind", kl.kind}, {"kl_coef", kl.coef}}},
              {"actor", a},
              {"critic", c},
              {"rft", r}};
}

}  // namespace ca::ppo_step
