// One training step of the native model on a batch of trajectories: ppo (actor and critic with GAE, or
// actor with GRPO), value-pretrain (critic only) or rft (supervised on the good trajectories).
// Writes the new checkpoint(s) with their optimizer state and returns the metrics record.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "tools/ppo-step/backend.hpp"
#include "tools/ppo-step/config.hpp"
#include "tools/ppo-step/records.hpp"

namespace ca::ppo_step {

struct StepPaths {
  std::string mode;        // ppo | value-pretrain | rft
  std::string policy;      // --policy CKPT
  std::string critic;      // --critic CKPT
  std::string ref;         // --ref CKPT (KL)
  std::string out;         // --out CKPT
  std::string critic_out;  // --critic-out CKPT (ppo; default OUT/critic)
  std::string merged;      // --merge CKPT: the policy with its adapter merged, as a full checkpoint
};

// Per token t (t < response_start: NaN): the logprob of tokens[t] under `model` at temperature.
std::vector<double> score_logprobs(TrainModel& model, const Trajectory& tr, double temperature);
// Values of every token's state (the critic's output at the previous position).
std::vector<double> score_critic(TrainModel& critic, const Trajectory& tr);

// Nothing in the batch to train on (rft: no trajectory kept): an input error, unless --empty-ok.
struct NothingToTrain : InputError {
  NothingToTrain(const std::string& why, int64_t skipped) : InputError(why), episodes_skipped(skipped) {}
  int64_t episodes_skipped;  // records left out: bad ones and those rft did not keep
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, StepPaths paths, uint64_t seed, DeviceOptions device = {});
  // Runs the step; `skipped` counts records dropped before (bad or filtered) for the metrics.
  Json run(std::vector<Trajectory>& batch, int64_t skipped);

 private:
  struct UpdateStats;
  struct RunPlan;  // what the step trains and writes (trainer.cpp)
  struct Scores;   // the batch scored by the models as they are
  RunPlan plan_run(std::vector<Trajectory>& batch, int64_t skipped);
  Scores score_batch(std::vector<Trajectory>& batch, const RunPlan& p, TrainModel* policy, TrainModel* critic,
                     TrainModel* ref, log::Progress& progress);
  void write_checkpoints(const RunPlan& p, TrainModel* policy, TrainModel* critic);
  // Where a step's seconds went: loading its models, scoring and updates, writing its checkpoints.
  struct StepTimes {
    std::chrono::steady_clock::time_point t0;
    double load_s = 0, train_s = 0, save_s = 0;
  };
  Json step_metrics(const RunPlan& p, const std::vector<Trajectory>& batch, const Scores& sc, const UpdateStats& st,
                    TrainModel* policy, TrainModel* critic, const StepTimes& times);
  void add_loss_metrics(const RunPlan& p, const UpdateStats& st, Json& metrics);
  void update_actor(TrainModel& policy, const std::vector<Trajectory>& batch,
                    const std::vector<std::vector<double>>& old_lp, const std::vector<std::vector<double>>& ref_lp,
                    const std::vector<std::vector<double>>& adv, const ModelTrainConfig& mc, bool sft,
                    const std::string& state_in, UpdateStats& stats);
  void update_critic(TrainModel& critic, const std::vector<Trajectory>& batch,
                     const std::vector<std::vector<double>>& old_values, const std::vector<std::vector<double>>& returns,
                     const std::string& state_in, UpdateStats& stats);
  std::vector<std::vector<std::size_t>> mini_batches(std::size_t n, int size);

  TrainConfig config_;
  StepPaths paths_;
  uint64_t seed_;
  uint64_t shuffle_state_;
  int64_t step_ = 0;  // the step being trained (errors name it)
  Backend backend_;
  log::Progress* progress_ = nullptr;  // sequence passes (scoring and every epoch's updates), on a terminal
};

// Copies the files of a checkpoint folder that are not weights (in any format: safetensors, .bin, .pt,
// their index files) or config (tokenizer, generation config, chat template) so vLLM can serve the new
// folder as it did the old one. Each is written whole (AtomicFile) or is an EnvironmentError.
void copy_checkpoint_extras(const std::string& from, const std::string& to);

}  // namespace ca::ppo_step
