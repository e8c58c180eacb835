// The training step: scoring the batch with the current models, advantages, mini-batch updates with
// gradient accumulation over sequences, clipping and AdamW, checkpoints and metrics.
#include "tools/ppo-step/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "libcommon/atomic_file.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/nn/optim.hpp"
#include "libcommon/paths.hpp"
#include "tools/ppo-step/losses.hpp"

namespace ca::ppo_step {

namespace fs = std::filesystem;

namespace {
// Inputs to the model: every token but the last; position t - 1 scores token t.
std::vector<int> model_inputs(const Trajectory& tr) { return {tr.tokens.begin(), tr.tokens.end() - 1}; }
// What position t - 1 scores: the response token t (only the trained ones when `trained_only`), else -1.
std::vector<int> model_targets(const Trajectory& tr, bool trained_only) {
  std::vector<int> targets(tr.tokens.size() - 1, -1);
  for (std::size_t t = std::size_t(tr.response_start); t < tr.tokens.size(); ++t)
    if (!trained_only || tr.mask[t] != 0) targets[t - 1] = tr.tokens[t];
  return targets;
}

std::string optimizer_path(const std::string& ckpt) {
  return ckpt.empty() ? std::string() : ckpt + "/trainer_state/optimizer.safetensors";
}

bool is_critic_checkpoint(const std::string& dir) {
  try {
    return nn::Config::from_json(parse_json(read_file(dir + "/config.json"), dir + "/config.json")).value_head;
  } catch (const std::exception&) {
    return false;
  }
}

int64_t read_step(const std::string& ckpt) {
  std::string path = ckpt + "/trainer_state/state.json";
  if (!fs::exists(path)) return 0;
  const Json state = parse_json(read_file(path), "'" + path + "'");  // InputError naming the file when not JSON
  const int64_t step = get_setting<int64_t>(state, "/step", 0, "'" + path + "'");
  if (step < 0) throw InputError("'" + path + "': step " + std::to_string(step) + " is negative");
  return step;
}

void write_state(const std::string& ckpt, int64_t step, const std::string& mode) {
  fs::create_directories(ckpt + "/trainer_state");
  write_file_atomic(ckpt + "/trainer_state/state.json", Json{{"step", step}, {"mode", mode}}.dump() + "\n");
}

// A non-finite loss or gradient ends the step: no update is skipped quietly and no checkpoint written,
// so exit 0 always means a finite model in --out.
[[noreturn]] void not_finite(const std::string& what, int64_t step, const std::string& model, int epoch,
                             const std::vector<std::size_t>& mb, const std::vector<Trajectory>& batch) {
  std::string ids;
  for (std::size_t k = 0; k < mb.size() && k < 4; ++k) ids += (k ? ", " : "") + batch[mb[k]].id;
  if (mb.size() > 4) ids += ", ... (" + std::to_string(mb.size()) + " episodes)";
  throw InputError("step " + std::to_string(step) + ": " + model + " " + what + " is not finite (epoch " +
                   std::to_string(epoch + 1) + ", mini-batch of " + ids + "): no checkpoint written; lower the " +
                   model + " lr or check the checkpoint and these episodes");
}

struct Mean {
  double sum = 0;
  int64_t n = 0;
  void add(double v) { sum += v, ++n; }
  Json json() const { return n ? Json(sum / double(n)) : Json(nullptr); }
};

// The rollout check (ppo): the trainer's logprobs of the sampled tokens under --policy as loaded
// against the ones the rollout recorded. Exact by construction: a sequence is measured by a forward
// that precedes the policy's first optimizer step of this call, either the update's own forward (the
// first mini-batch of the first epoch: the whole batch when mini_batch_size is 0, at no cost) or,
// for the sequences of later mini-batches, a scoring pass run before the updates begin.
struct RolloutCheck {
  std::vector<char> checked;  // per sequence: recorded logprobs to compare (not recomputed)
  int64_t no_logprobs = 0;    // unchecked: a turn without recorded logprobs
  int64_t recomputed = 0;     // unchecked: actor.recompute_old_logprobs
  RolloutMismatch all;
  std::vector<double> episode_abs_sum;  // per sequence, for naming the worst one
  std::vector<int64_t> episode_tokens;
  int64_t non_finite = 0;  // trainer logprobs that were not finite (the loss check names them)
  int64_t extra_passes = 0;  // sequences scored only for the check
  double extra_seconds = 0;
  bool measured = false;

  // Adds sequence i's model tokens; logprob[p] scores token p + 1 (TrainModel::score's layout).
  void add(std::size_t i, const Trajectory& tr, const std::vector<double>& logprob, const std::vector<double>& rollout,
           const PolicyClip& clip) {
    if (checked.empty() || !checked[i]) return;
    for (std::size_t t = std::size_t(tr.response_start); t < tr.tokens.size(); ++t) {
      if (tr.mask[t] == 0) continue;
      const double lp = logprob[t - 1];
      if (!std::isfinite(lp)) {
        ++non_finite;
        continue;
      }
      all.add(lp, rollout[t], clip);
      episode_abs_sum[i] += std::fabs(lp - rollout[t]);
      ++episode_tokens[i];
    }
  }
  int64_t episodes_checked() const {
    int64_t n = 0;
    for (char c : checked) n += c;
    return n;
  }
  // The checked sequence with the largest mean |difference|, as "ID: mean X over N tokens".
  std::string worst(const std::vector<Trajectory>& batch) const {
    std::size_t w = batch.size();
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (episode_tokens[i] > 0 &&
          (w == batch.size() || episode_abs_sum[i] / double(episode_tokens[i]) > episode_abs_sum[w] / double(episode_tokens[w])))
        w = i;
    if (w == batch.size()) return "";
    return batch[w].id + ": mean " + log::cat(episode_abs_sum[w] / double(episode_tokens[w])) + " over " +
           std::to_string(episode_tokens[w]) + " tokens";
  }
  Json json(double bound) const {
    const bool any = all.tokens > 0;
    const auto num = [any](double v) { return any ? Json(v) : Json(nullptr); };
    return Json{{"episodes_checked", episodes_checked()},
                {"episodes_unchecked", no_logprobs + recomputed},
                {"unchecked_no_logprobs", no_logprobs},
                {"unchecked_recomputed", recomputed},
                {"tokens_checked", all.tokens},
                {"logprob_abs_diff_mean", num(all.abs_mean())},
                {"logprob_abs_diff_max", num(all.abs_max)},
                {"prob_abs_diff_mean", num(any ? all.prob_abs_sum / double(all.tokens) : 0.0)},
                {"ratio_mean", num(all.ratio_mean)},
                {"ratio_std", num(all.ratio_std())},
                {"ratio_min", num(all.ratio_min)},
                {"ratio_max", num(all.ratio_max)},
                {"ratio_outside_clip", num(any ? double(all.outside_clip) / double(all.tokens) : 0.0)},
                {"bound", bound > 0 ? Json(bound) : Json(nullptr)},
                {"extra_forward_passes", extra_passes},
                {"extra_forward_seconds", extra_seconds}};
  }
};

// Scores, with the policy as loaded, the checked sequences that the first update's forward will not
// see: those outside the first mini-batch that has model tokens (none when it is the whole batch).
void check_before_updates(TrainModel& policy, const std::vector<Trajectory>& batch,
                          const std::vector<std::vector<std::size_t>>& batches, double temperature,
                          const PolicyClip& clip, const std::vector<std::vector<double>>& old_lp, RolloutCheck& check) {
  std::vector<char> in_first(batch.size(), 0);
  for (const auto& mb : batches) {
    double n_tokens = 0;
    for (auto i : mb) n_tokens += double(batch[i].model_tokens());
    if (n_tokens == 0) continue;
    for (auto i : mb) in_first[i] = 1;
    break;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (in_first[i] || !check.checked[i] || batch[i].model_tokens() == 0) continue;
    const auto scores = policy.score(model_inputs(batch[i]), model_targets(batch[i], true), temperature);
    check.add(i, batch[i], scores.logprob, old_lp[i], clip);
    ++check.extra_passes;
  }
  check.extra_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Called once every checked sequence is measured, before the policy's first optimizer step: says the
// figures and stops the step (exit 2, nothing written) when the mean exceeds the bound.
void judge_rollout(RolloutCheck& check, const std::vector<Trajectory>& batch, double bound, int64_t step,
                   const std::string& policy, double temperature) {
  check.measured = true;
  const RolloutMismatch& m = check.all;
  const int64_t unchecked = check.no_logprobs + check.recomputed;
  if (m.tokens > 0)
    log::info("rollout logprobs against the policy's: mean |diff| ", m.abs_mean(), " (max ", m.abs_max, ") over ", m.tokens,
              " tokens of ", check.episodes_checked(), " episodes; ratio mean ", m.ratio_mean, ", std ", m.ratio_std(),
              ", range [", m.ratio_min, ", ", m.ratio_max, "]", check.extra_passes ? log::cat("; ", check.extra_passes, " sequences scored for the check in ", check.extra_seconds, " s") : std::string());
  if (unchecked > 0)
    log::warn("rollout logprobs not checked for ", unchecked, " of ", batch.size(), " episodes (",
              check.no_logprobs ? log::cat(check.no_logprobs, " without recorded logprobs") : std::string(),
              check.no_logprobs && check.recomputed ? ", " : "",
              check.recomputed ? log::cat(check.recomputed, " recomputed: actor.recompute_old_logprobs") : std::string(), ")");
  if (bound <= 0 || m.tokens == 0 || m.abs_mean() <= bound) return;
  throw InputError("step " + std::to_string(step) + ": the rollout's logprobs are not the policy's: mean |logprob - recorded| " +
                   log::cat(m.abs_mean()) + " over " + std::to_string(m.tokens) + " tokens of " +
                   std::to_string(check.episodes_checked()) + " episodes (max " + log::cat(m.abs_max) + "; worst episode " +
                   check.worst(batch) + ") exceeds actor.max_logprob_mismatch " + log::cat(bound) +
                   ": no update made, no checkpoint written. Likely cause: the rollout did not sample with '" + policy +
                   "' (the server never applied the new weights or adapter, or served another checkpoint), or sampled "
                   "at a temperature other than actor.temperature " + log::cat(temperature));
}
}  // namespace

struct Trainer::UpdateStats {
  Mean pg_loss, kl_loss, entropy, clip_high, clip_low, clip_dual, approx_kl, actor_grad_norm, sft_loss;
  Mean vf_loss, vf_clipfrac, critic_grad_norm;
  double vf_loss_first = NAN, vf_loss_last = NAN, sft_loss_first = NAN, sft_loss_last = NAN;
  int64_t actor_steps = 0, critic_steps = 0, trained_tokens = 0;
  // The policy's epochs, each its tokens and seconds: a later epoch runs the same shapes warm (GEMM
  // plans, buffers, modules), the throughput a long-running trainer sees.
  std::vector<std::pair<int64_t, double>> actor_epochs;
  RolloutCheck rollout;  // ppo: filled by update_actor before the policy's first optimizer step
};

struct Trainer::RunPlan {
  std::string mode;                       // ppo | value-pretrain | rft
  bool use_critic = false, use_actor = false, need_ref = false;
  int64_t kept_skipped = 0;               // records left out: bad ones and those rft did not keep
  std::string critic_in, critic_out;      // the critic read and the one written
  int64_t step = 0;                       // the step being trained
  fs::path out_norm, critic_norm;         // --out and the critic's folder, absolute
  bool critic_nested = false;             // the critic is written inside OUT, with it
};

struct Trainer::Scores {
  std::vector<std::vector<double>> old_lp, ref_lp, values;  // per trajectory, per token
  std::vector<Sequence> seqs;                               // response-level arrays for the estimator
  int64_t recomputed = 0, total_tokens = 0, model_tokens = 0;
};

std::vector<double> score_logprobs(TrainModel& model, const Trajectory& tr, double temperature) {
  const std::size_t n = tr.tokens.size();
  auto scores = model.score(model_inputs(tr), model_targets(tr, false), temperature);
  std::vector<double> lp(n, NAN);
  for (std::size_t t = std::size_t(tr.response_start); t < n; ++t) lp[t] = scores.logprob[t - 1];
  return lp;
}

std::vector<double> score_critic(TrainModel& critic, const Trajectory& tr) {
  std::vector<double> v(tr.tokens.size(), 0.0);
  auto values = critic.values(model_inputs(tr));
  for (std::size_t t = 1; t < tr.tokens.size(); ++t) v[t] = values[t - 1];
  return v;
}

void copy_checkpoint_extras(const std::string& from, const std::string& to) {
  std::error_code ec;
  if (from.empty() || fs::equivalent(fs::path(from), fs::path(to), ec)) return;
  // Weights in any format are the old model's: a pytorch_model.bin carried over would be loaded in
  // place of the new model.safetensors by a reader that prefers it.
  static const char* kWeightExtensions[] = {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf"};
  for (auto& e : fs::directory_iterator(from)) {
    if (!e.is_regular_file()) continue;
    const auto name = e.path().filename().string(), ext = e.path().extension().string();
    bool weights = name.size() > 11 && name.compare(name.size() - 11, 11, ".index.json") == 0;
    for (const char* w : kWeightExtensions) weights = weights || ext == w;
    if (name == "config.json" || name == "adapter_config.json" || weights) {
      if (name != "config.json" && ext != ".safetensors") log::verbose("not copied to the new checkpoint (old weights): ", e.path().string());
      continue;
    }
    // Streamed through AtomicFile: a full disk is an error, never a cut tokenizer.json in a checkpoint that exits 0.
    std::ifstream in(e.path(), std::ios::binary);
    if (!in) throw EnvironmentError("cannot read '" + e.path().string() + "'");
    AtomicFile out((fs::path(to) / name).string());
    std::vector<char> buf(1 << 20);
    while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0) out.write(buf.data(), std::size_t(in.gcount()));
    if (in.bad()) throw EnvironmentError("cannot read '" + e.path().string() + "'");
    out.commit();
  }
}

Trainer::Trainer(const TrainConfig& config, StepPaths paths, uint64_t seed, DeviceOptions device)
    : config_(config), paths_(std::move(paths)), seed_(seed), shuffle_state_(seed), backend_(std::move(device)) {}

std::vector<std::vector<std::size_t>> Trainer::mini_batches(std::size_t n, int size) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(shuffle_state_++);
  std::shuffle(order.begin(), order.end(), rng);
  std::size_t per = size <= 0 ? n : std::size_t(size);
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t i = 0; i < n; i += per) out.emplace_back(order.begin() + i, order.begin() + std::min(n, i + per));
  return out;
}

// long: the update loop (epoch, mini-batch, token) with each loss term beside its gradient, as PPO is written
void Trainer::update_actor(TrainModel& policy, const std::vector<Trajectory>& batch,
                           const std::vector<std::vector<double>>& old_lp, const std::vector<std::vector<double>>& ref_lp,
                           const std::vector<std::vector<double>>& adv, const ModelTrainConfig& mc, bool sft,
                           const std::string& state_in, UpdateStats& st) {
  if (policy.load_optimizer(optimizer_path(state_in))) log::verbose("actor optimizer state from ", state_in);
  const bool kl_loss = !sft && config_.kl.as_loss;
  RolloutCheck& check = st.rollout;
  const bool checking = !sft && !check.checked.empty();
  bool updated = false;  // the policy had an optimizer step in this call
  for (int epoch = 0; epoch < mc.epochs; ++epoch) {
    const auto batches = mini_batches(batch.size(), mc.mini_batch_size);
    if (checking && epoch == 0) check_before_updates(policy, batch, batches, config_.temperature, config_.clip, old_lp, check);
    const auto epoch_t0 = std::chrono::steady_clock::now();
    const int64_t epoch_tokens0 = st.trained_tokens;
    for (auto& mb : batches) {
      double n_tokens = 0;
      for (auto i : mb) n_tokens += double(batch[i].model_tokens());
      if (n_tokens == 0) continue;
      policy.zero_grad();
      Mean pg, kl, ent, high, low, dual, akl, nll;
      for (auto i : mb) {
        const Trajectory& tr = batch[i];
        const std::vector<int> targets = model_targets(tr, true);
        const auto scores = policy.score(model_inputs(tr), targets, config_.temperature);
        if (checking && !updated) check.add(i, tr, scores.logprob, old_lp[i], config_.clip);
        std::vector<float> c_lp_of(targets.size(), 0.0f), c_ent_of(targets.size(), 0.0f);
        for (std::size_t t = std::size_t(tr.response_start); t < tr.tokens.size(); ++t) {
          if (tr.mask[t] == 0) continue;
          const double lp = scores.logprob[t - 1], h = scores.entropy[t - 1];
          double c_lp = 0, c_ent = 0;
          if (sft) {
            nll.add(-lp);
            c_lp = -1.0 / n_tokens;
          } else {
            auto pl = policy_token_loss(lp, old_lp[i][t], adv[i][t], config_.clip);
            pg.add(pl.loss);
            high.add(pl.clipped_high);
            low.add(pl.clipped_low);
            dual.add(pl.dual_clipped);
            akl.add(old_lp[i][t] - lp);
            c_lp = pl.dloss_dlogp;
            if (kl_loss) {
              kl.add(kl_estimate(lp, ref_lp[i][t], config_.kl.kind));
              c_lp += config_.kl.coef * kl_estimate_grad(lp, ref_lp[i][t], config_.kl.kind);
            }
            c_lp /= n_tokens;
            c_ent = -config_.entropy_coeff / n_tokens;
          }
          ent.add(h);
          c_lp_of[t - 1] = float(c_lp);
          c_ent_of[t - 1] = float(c_ent);
        }
        policy.backward_scores(c_lp_of, c_ent_of);
        st.trained_tokens += int64_t(tr.tokens.size() - 1);
        if (progress_) progress_->tick();
      }
      const char* model = sft ? "rft" : "actor";
      if (sft && !std::isfinite(nll.sum)) not_finite("loss (NLL)", step_, model, epoch, mb, batch);
      if (!sft && (!std::isfinite(pg.sum) || !std::isfinite(kl.sum))) not_finite("policy loss", step_, model, epoch, mb, batch);
      if (checking && !updated) judge_rollout(check, batch, config_.max_logprob_mismatch, step_, paths_.policy, config_.temperature);
      double norm = policy.clip_grad_norm(mc.grad_clip);
      if (!std::isfinite(norm)) not_finite("gradient norm", step_, model, epoch, mb, batch);
      policy.adamw_step(mc.adamw);
      updated = true;
      ++st.actor_steps;
      st.actor_grad_norm.add(norm);
      st.entropy.add(ent.sum / double(std::max<int64_t>(1, ent.n)));
      if (sft) {
        const double mean_nll = nll.sum / double(std::max<int64_t>(1, nll.n));
        st.sft_loss.add(mean_nll);
        if (std::isnan(st.sft_loss_first)) st.sft_loss_first = mean_nll;
        st.sft_loss_last = mean_nll;
      } else {
        st.pg_loss.add(pg.sum / double(pg.n));
        st.clip_high.add(high.sum / double(high.n));
        st.clip_low.add(low.sum / double(low.n));
        st.clip_dual.add(dual.sum / double(dual.n));
        st.approx_kl.add(akl.sum / double(akl.n));
        if (kl_loss) st.kl_loss.add(kl.sum / double(kl.n));
      }
    }
    backend_.sync();  // the epoch's last AdamW is still running on a GPU: its time is the epoch's
    st.actor_epochs.emplace_back(st.trained_tokens - epoch_tokens0,
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_t0).count());
  }
  // No mini-batch had model tokens: nothing was compared, but the unchecked episodes are still said.
  if (checking && !check.measured) judge_rollout(check, batch, config_.max_logprob_mismatch, step_, paths_.policy, config_.temperature);
}

void Trainer::update_critic(TrainModel& critic, const std::vector<Trajectory>& batch,
                            const std::vector<std::vector<double>>& old_values,
                            const std::vector<std::vector<double>>& returns, const std::string& state_in,
                            UpdateStats& st) {
  if (critic.load_optimizer(optimizer_path(state_in))) log::verbose("critic optimizer state from ", state_in);
  const ModelTrainConfig& mc = config_.critic;
  for (int epoch = 0; epoch < mc.epochs; ++epoch)
    for (auto& mb : mini_batches(batch.size(), mc.mini_batch_size)) {
      double n_tokens = 0;
      for (auto i : mb) n_tokens += double(batch[i].model_tokens());
      if (n_tokens == 0) continue;
      critic.zero_grad();
      Mean loss, clipped;
      for (auto i : mb) {
        const Trajectory& tr = batch[i];
        const auto values = critic.values(model_inputs(tr));
        std::vector<float> dvalues(values.size(), 0.0f);
        for (std::size_t t = std::size_t(tr.response_start); t < tr.tokens.size(); ++t) {
          if (tr.mask[t] == 0) continue;
          auto vl = value_token_loss(values[t - 1], old_values[i][t], returns[i][t], config_.cliprange_value);
          loss.add(vl.loss);
          clipped.add(vl.clipped);
          dvalues[t - 1] = float(vl.dloss_dv / n_tokens);
        }
        critic.backward_values(dvalues);
        st.trained_tokens += int64_t(tr.tokens.size() - 1);
        if (progress_) progress_->tick();
      }
      if (!std::isfinite(loss.sum)) not_finite("value loss", step_, "critic", epoch, mb, batch);
      double norm = critic.clip_grad_norm(mc.grad_clip);
      if (!std::isfinite(norm)) not_finite("gradient norm", step_, "critic", epoch, mb, batch);
      critic.adamw_step(mc.adamw);
      ++st.critic_steps;
      const double mean_loss = loss.sum / double(loss.n);
      if (std::isnan(st.vf_loss_first)) st.vf_loss_first = mean_loss;
      st.vf_loss_last = mean_loss;
      st.vf_loss.add(mean_loss);
      st.vf_clipfrac.add(clipped.sum / double(clipped.n));
      st.critic_grad_norm.add(norm);
    }
}

// What this step trains and where it writes, checked before any model is loaded: the options the mode
// needs (UsageError), rft's filter (NothingToTrain when nothing is kept), and the checkpoint targets.
Trainer::RunPlan Trainer::plan_run(std::vector<Trajectory>& batch, int64_t skipped) {
  RunPlan p;
  p.mode = paths_.mode;
  const std::string& mode = p.mode;
  p.use_critic = mode == "value-pretrain" || (mode == "ppo" && config_.estimator == "gae");
  p.use_actor = mode == "ppo" || mode == "rft";
  p.need_ref = mode == "ppo" && (config_.kl.in_reward || config_.kl.as_loss);
  if (p.use_actor && paths_.policy.empty()) throw UsageError("--mode " + mode + " needs --policy CKPT");
  if (p.use_critic && paths_.critic.empty() && mode == "ppo")
    throw UsageError("--mode ppo with the GAE estimator needs --critic CKPT (or set algorithm.estimator: grpo)");
  if (mode == "value-pretrain" && paths_.critic.empty() && paths_.policy.empty())
    throw UsageError("--mode value-pretrain needs --critic CKPT (or --policy CKPT to start a critic from)");
  if (p.need_ref && paths_.ref.empty()) throw UsageError("KL in the reward or as a loss needs --ref CKPT");
  if (paths_.out.empty()) throw UsageError("--out CKPT is required");

  p.kept_skipped = skipped;
  if (mode == "rft") {
    std::vector<Trajectory> kept;
    for (auto& tr : batch)
      if (tr.reward > config_.rft_min_reward && (!config_.rft_require_clean_tools || tr.clean_tool_use))
        kept.push_back(std::move(tr));
    p.kept_skipped += int64_t(batch.size() - kept.size());
    log::info("rft: ", kept.size(), " of ", batch.size(), " trajectories kept (reward > ", config_.rft_min_reward,
              config_.rft_require_clean_tools ? ", clean tool use)" : ")");
    batch = std::move(kept);
  }
  if (batch.empty()) throw NothingToTrain("no trajectories to train on", p.kept_skipped);

  p.critic_in = paths_.critic.empty() ? paths_.policy : paths_.critic;
  p.critic_out =
      mode == "value-pretrain" ? paths_.out : (paths_.critic_out.empty() ? paths_.out + "/critic" : paths_.critic_out);
  const std::string step_source = p.use_actor ? paths_.policy : p.critic_in;
  p.step = read_step(step_source) + 1;
  step_ = p.step;
  // Where the checkpoints go is checked before any work: a folder that is not a checkpoint is never
  // replaced, and the critic is either inside OUT (written with it) or a folder of its own.
  p.out_norm = fs::absolute(paths_.out).lexically_normal();
  p.critic_norm = fs::absolute(p.critic_out).lexically_normal();
  const auto inside = [](const fs::path& a, const fs::path& b) {  // a strictly inside b
    auto rel = a.lexically_relative(b);
    return !rel.empty() && rel != "." && *rel.begin() != "..";
  };
  p.critic_nested = p.use_actor && p.use_critic && inside(p.critic_norm, p.out_norm);
  if (p.use_actor && p.use_critic && p.critic_norm == p.out_norm)
    throw UsageError("--critic-out must differ from --out (both checkpoints would write config.json and model.safetensors there)");
  if (p.use_actor && p.use_critic && inside(p.out_norm, p.critic_norm))
    throw UsageError("--out must not be inside --critic-out");
  if (p.use_actor) nn::check_checkpoint_target(paths_.out);
  if (p.use_critic && !p.critic_nested) nn::check_checkpoint_target(p.critic_out);

  return p;
}

// The batch scored with the models as they are (old logprobs, values, reference logprobs), every
// score finite, and the response-level arrays the estimator reads.
Trainer::Scores Trainer::score_batch(std::vector<Trajectory>& batch, const RunPlan& p, TrainModel* policy,
                                     TrainModel* critic, TrainModel* ref, log::Progress& progress) {
  const std::string& mode = p.mode;
  const std::size_t B = batch.size();
  const bool scores = mode == "ppo" || p.use_critic;
  Scores sc;
  sc.old_lp.resize(B);
  sc.ref_lp.resize(B);
  sc.values.resize(B);
  sc.seqs.resize(B);
  for (std::size_t i = 0; i < B; ++i) {
    Trajectory& tr = batch[i];
    sc.total_tokens += int64_t(tr.tokens.size());
    sc.model_tokens += int64_t(tr.model_tokens());
    if (mode == "ppo") {
      if (!tr.has_old_logprobs || config_.recompute_old_logprobs) {
        sc.old_lp[i] = score_logprobs(*policy, tr, config_.temperature);
        ++sc.recomputed;
      } else {
        sc.old_lp[i] = tr.old_logprobs;
      }
      if (p.need_ref) sc.ref_lp[i] = score_logprobs(*ref, tr, config_.temperature);
    }
    if (p.use_critic) sc.values[i] = score_critic(*critic, tr);
    for (std::size_t t = std::size_t(tr.response_start); t < tr.tokens.size(); ++t) {
      if (tr.mask[t] == 0) continue;
      const char* bad = mode == "ppo" && !std::isfinite(sc.old_lp[i][t])                  ? "old logprob"
                        : p.need_ref && mode == "ppo" && !std::isfinite(sc.ref_lp[i][t])    ? "reference logprob"
                        : p.use_critic && !std::isfinite(sc.values[i][t])                   ? "value"
                                                                                        : nullptr;
      if (bad)
        throw InputError("step " + std::to_string(p.step) + ": episode " + tr.id + ": the " + bad + " of token " +
                         std::to_string(t) + " is not finite: no checkpoint written");
    }
    if (scores) progress.tick();
    if (mode == "rft") continue;
    // Response-level arrays for the estimator.
    const std::size_t s0 = std::size_t(tr.response_start), n = tr.tokens.size();
    Sequence& s = sc.seqs[i];
    s.id = tr.id;
    s.group = tr.group;
    s.mask.assign(tr.mask.begin() + s0, tr.mask.end());
    s.values = p.use_critic ? std::vector<double>(sc.values[i].begin() + s0, sc.values[i].end()) : std::vector<double>(n - s0, 0.0);
    s.token_rewards = outcome_token_rewards(s.mask, tr.reward);
    if (mode == "ppo" && config_.kl.in_reward)
      for (std::size_t t = s0; t < n; ++t)
        if (tr.mask[t] > 0) s.token_rewards[t - s0] -= config_.kl.coef * kl_estimate(sc.old_lp[i][t], sc.ref_lp[i][t], config_.kl.kind);
  }
  return sc;
}

// Checkpoints: weights, optimizer moments and the step counter (outside the timed part), each
// written complete or not at all: staged beside its folder, then renamed into place whole.
void Trainer::write_checkpoints(const RunPlan& p, TrainModel* policy, TrainModel* critic) {
  std::unique_ptr<nn::CheckpointWriter> policy_ckpt, critic_ckpt;
  if (policy) policy_ckpt = std::make_unique<nn::CheckpointWriter>(paths_.out);
  std::string critic_dir;
  if (critic && p.critic_nested) {
    critic_dir = (fs::path(policy_ckpt->path()) / p.critic_norm.lexically_relative(p.out_norm)).string();
  } else if (critic) {
    critic_ckpt = std::make_unique<nn::CheckpointWriter>(p.critic_out);
    critic_dir = critic_ckpt->path();
  }
  if (policy) {
    if (auto bad = policy->non_finite_weight(); !bad.empty())
      throw InputError("step " + std::to_string(p.step) + ": the updated policy has a non-finite weight (" + bad +
                       "): no checkpoint written to '" + paths_.out + "'");
    policy->save_optimizer(optimizer_path(policy_ckpt->path()));
    policy->save(policy_ckpt->path());
    copy_checkpoint_extras(paths_.policy, policy_ckpt->path());
    write_state(policy_ckpt->path(), p.step, p.mode);
  }
  if (critic) {
    if (auto bad = critic->non_finite_weight(); !bad.empty())
      throw InputError("step " + std::to_string(p.step) + ": the updated critic has a non-finite weight (" + bad +
                       "): no checkpoint written to '" + p.critic_out + "'");
    critic->save_optimizer(optimizer_path(critic_dir));
    critic->save(critic_dir);
    write_state(critic_dir, p.step, p.mode);
  }
  // --merge: the policy as one full checkpoint (base + adapter), for a server without LoRA.
  std::unique_ptr<nn::CheckpointWriter> merged_ckpt;
  if (policy && !paths_.merged.empty()) {
    merged_ckpt = std::make_unique<nn::CheckpointWriter>(paths_.merged);
    policy->save_merged(merged_ckpt->path());
    copy_checkpoint_extras(paths_.policy, merged_ckpt->path());
    write_state(merged_ckpt->path(), p.step, p.mode);
  }
  if (critic_ckpt) critic_ckpt->commit();
  if (policy_ckpt) policy_ckpt->commit();
  if (merged_ckpt) merged_ckpt->commit();
}

// The step's metrics record (cuda-agent/ppo-metrics/v1): what was trained on and written, the batch's
// rewards and advantages, the losses and clip fractions, throughput and the config.
Json Trainer::step_metrics(const RunPlan& p, const std::vector<Trajectory>& batch, const Scores& sc,
                           const UpdateStats& st, TrainModel* policy, TrainModel* critic, const StepTimes& times) {
  const std::string& mode = p.mode;
  const std::size_t B = batch.size();
  Json metrics;
  metrics["schema"] = "cuda-agent/ppo-metrics/v1";
  double reward_sum = 0, reward_ss = 0;
  for (auto& tr : batch) reward_sum += tr.reward;
  const double reward_mean = reward_sum / double(B);
  for (auto& tr : batch) reward_ss += (tr.reward - reward_mean) * (tr.reward - reward_mean);
  Json ids = Json::array();
  for (auto& tr : batch) ids.push_back(tr.id);
  metrics["step_id"] = content_id(Json{{"mode", mode}, {"out", paths_.out}, {"step", p.step}, {"episodes", ids}});
  metrics["step"] = p.step;
  metrics["mode"] = mode;
  metrics["policy"] = paths_.policy.empty() ? Json(nullptr) : Json(paths_.policy);
  metrics["critic"] = p.use_critic ? Json(p.critic_in) : Json(nullptr);
  metrics["out"] = policy ? Json(paths_.out) : Json(nullptr);
  metrics["critic_out"] = critic ? Json(p.critic_out) : Json(nullptr);
  metrics["seed"] = seed_;
  metrics["episodes"] = int64_t(B);
  metrics["episodes_skipped"] = p.kept_skipped;
  metrics["tokens"] = sc.total_tokens;
  metrics["model_tokens"] = sc.model_tokens;
  metrics["reward_mean"] = reward_mean;
  metrics["reward_std"] = B > 1 ? std::sqrt(reward_ss / double(B - 1)) : 0.0;
  if (mode != "rft") {
    std::vector<const std::vector<double>*> a, r, m;
    for (auto& s : sc.seqs) a.push_back(&s.advantages), r.push_back(&s.returns), m.push_back(&s.mask);
    metrics["advantage_mean"] = masked_mean(a, m);
    metrics["return_mean"] = masked_mean(r, m);
  }
  if (p.use_critic) {
    std::vector<double> all_r, all_v, all_m;
    for (std::size_t i = 0; i < B; ++i) {
      all_r.insert(all_r.end(), sc.seqs[i].returns.begin(), sc.seqs[i].returns.end());
      all_v.insert(all_v.end(), sc.seqs[i].values.begin(), sc.seqs[i].values.end());
      all_m.insert(all_m.end(), sc.seqs[i].mask.begin(), sc.seqs[i].mask.end());
    }
    metrics["value_mean"] = token_mean(all_v, all_m);
    metrics["explained_variance"] = explained_variance(all_r, all_v, all_m);
  }
  add_loss_metrics(p, st, metrics);
  if (p.use_actor) metrics["entropy"] = st.entropy.json();
  metrics["grad_norm"] = Json{{"actor", p.use_actor ? st.actor_grad_norm.json() : Json(nullptr)},
                              {"critic", p.use_critic ? st.critic_grad_norm.json() : Json(nullptr)}};
  metrics["optimizer_steps"] = Json{{"actor", st.actor_steps}, {"critic", st.critic_steps}};
  metrics["trained_tokens"] = st.trained_tokens;
  metrics["tokens_per_s"] = times.train_s > 0 ? double(st.trained_tokens) / times.train_s : 0.0;
  if (p.use_actor) {
    Json epochs = Json::array();
    for (const auto& [tokens, secs] : st.actor_epochs)
      epochs.push_back(Json{{"tokens", tokens}, {"seconds", secs}, {"tokens_per_s", secs > 0 ? double(tokens) / secs : 0.0}});
    metrics["actor_epochs"] = epochs;
  }
  metrics["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - times.t0).count();
  metrics["phase_seconds"] = Json{{"load", times.load_s}, {"train", times.train_s}, {"save", times.save_s}};
  metrics["device"] = backend_.describe();
  metrics["load_format"] = backend_.dummy() ? "dummy" : "safetensors";
  if (policy && !policy->lora().is_null()) metrics["lora"]["policy"] = policy->lora();
  if (critic && !critic->lora().is_null()) metrics["lora"]["critic"] = critic->lora();
  if (!paths_.merged.empty() && policy) metrics["merged"] = paths_.merged;
  metrics["config"] = config_.to_json();
  return metrics;
}

// The losses (ppo, rft, critic) and the clip fractions, KL and rollout check beside them.
void Trainer::add_loss_metrics(const RunPlan& p, const UpdateStats& st, Json& metrics) {
  const std::string& mode = p.mode;
  Json losses = Json::object();
  if (mode == "ppo") {
    losses["pg_loss"] = st.pg_loss.json();
    if (config_.kl.as_loss) losses["kl_loss"] = st.kl_loss.json();
    losses["entropy_bonus"] = config_.entropy_coeff > 0 ? Json(-config_.entropy_coeff * (st.entropy.n ? st.entropy.sum / st.entropy.n : 0.0)) : Json(0.0);
    metrics["pg_clipfrac_high"] = st.clip_high.json();
    metrics["pg_clipfrac_low"] = st.clip_low.json();
    metrics["pg_clipfrac_dual"] = st.clip_dual.json();
    metrics["approx_kl"] = st.approx_kl.json();
    metrics["rollout_mismatch"] = st.rollout.json(config_.max_logprob_mismatch);
  }
  if (mode == "rft") {
    losses["sft_loss"] = st.sft_loss.json();
    // First and last update's mean NLL per response token: whether the epochs converged.
    metrics["sft_loss_first"] = std::isnan(st.sft_loss_first) ? Json(nullptr) : Json(st.sft_loss_first);
    metrics["sft_loss_last"] = std::isnan(st.sft_loss_last) ? Json(nullptr) : Json(st.sft_loss_last);
  }
  if (p.use_critic) {
    losses["vf_loss"] = st.vf_loss.json();
    metrics["vf_loss_first"] = std::isnan(st.vf_loss_first) ? Json(nullptr) : Json(st.vf_loss_first);
    metrics["vf_loss_last"] = std::isnan(st.vf_loss_last) ? Json(nullptr) : Json(st.vf_loss_last);
    metrics["vf_clipfrac"] = st.vf_clipfrac.json();
  }
  metrics["losses"] = losses;
}

Json Trainer::run(std::vector<Trajectory>& batch, int64_t skipped) {
  const auto t0 = std::chrono::steady_clock::now();
  const RunPlan p = plan_run(batch, skipped);
  const std::string& mode = p.mode;
  std::unique_ptr<TrainModel> policy, critic, ref;
  if (p.use_actor) policy = backend_.load(paths_.policy);
  if (p.use_critic) critic = backend_.load(p.critic_in, /*as_critic=*/true);
  if (p.need_ref) ref = backend_.load(paths_.ref);
  const auto t_loaded = std::chrono::steady_clock::now();
  backend_.profile_reset();  // CA_NN_CUDA_PROFILE=1: the kernels of the train phase alone

  const std::size_t B = batch.size();
  const bool scores = mode == "ppo" || p.use_critic;
  log::Progress progress("sequence passes", int64_t(B) * ((scores ? 1 : 0) + (p.use_critic ? config_.critic.epochs : 0) +
                                                          (mode == "ppo" ? config_.actor.epochs : 0) +
                                                          (mode == "rft" ? config_.rft.epochs : 0)));
  progress_ = &progress;
  Scores sc = score_batch(batch, p, policy.get(), critic.get(), ref.get(), progress);
  ref.reset();  // scored: its memory goes back before the updates
  if (sc.recomputed) log::info("old logprobs recomputed with the policy for ", sc.recomputed, " of ", B, " trajectories");

  UpdateStats st;
  if (mode == "ppo") {  // the rollout check: which sequences carry recorded logprobs to compare
    RolloutCheck& rc = st.rollout;
    rc.checked.assign(B, 0);
    rc.episode_abs_sum.assign(B, 0.0);
    rc.episode_tokens.assign(B, 0);
    for (std::size_t i = 0; i < B; ++i) {
      if (!batch[i].has_old_logprobs) ++rc.no_logprobs;
      else if (config_.recompute_old_logprobs) ++rc.recomputed;
      else rc.checked[i] = 1;
    }
  }
  std::vector<std::vector<double>> adv(B), returns(B);
  if (mode != "rft") {
    const std::string estimator = mode == "value-pretrain" ? "gae" : config_.estimator;
    compute_advantages(sc.seqs, estimator, config_.gamma, config_.lam, config_.whiten, config_.grpo_norm_by_std);
    for (std::size_t i = 0; i < B; ++i) {
      const std::size_t s0 = std::size_t(batch[i].response_start), n = batch[i].tokens.size();
      adv[i].assign(n, 0.0);
      returns[i].assign(n, 0.0);
      for (std::size_t t = s0; t < n; ++t) {
        adv[i][t] = sc.seqs[i].advantages[t - s0];
        returns[i][t] = sc.seqs[i].returns[t - s0];
      }
    }
  }


  // A critic started from a causal LM has no optimizer state of its own yet.
  const bool critic_has_state = p.use_critic && is_critic_checkpoint(p.critic_in);
  if (p.use_critic) update_critic(*critic, batch, sc.values, returns, critic_has_state ? p.critic_in : "", st);
  if (mode == "ppo") update_actor(*policy, batch, sc.old_lp, sc.ref_lp, adv, config_.actor, false, paths_.policy, st);
  if (mode == "rft") update_actor(*policy, batch, sc.old_lp, sc.ref_lp, adv, config_.rft, true, paths_.policy, st);
  backend_.sync();  // the last optimizer step's kernels count in the train phase, not in the save
  const auto t_trained = std::chrono::steady_clock::now();
  backend_.profile_report("ppo-step " + mode + " step " + std::to_string(p.step) + ", scoring and updates");
  progress.finish();
  progress_ = nullptr;

  write_checkpoints(p, policy.get(), critic.get());
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const StepTimes times{t0, secs(t0, t_loaded), secs(t_loaded, t_trained), secs(t_trained, std::chrono::steady_clock::now())};
  return step_metrics(p, batch, sc, st, policy.get(), critic.get(), times);
}

}  // namespace ca::ppo_step
