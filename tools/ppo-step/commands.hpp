// ppo-step's smaller subcommands: `advantages` (the math on sequence records), `sample` (episodes from a
// native policy, for tests and toy tasks), `tokenize` (the tokens a step trains on), `init` (a random
// native model in HF layout).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "libcommon/cli.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn/sample.hpp"
#include "libcommon/nn_cuda/model.hpp"
#include "libcommon/record_loop.hpp"
#include "tools/ppo-step/records.hpp"
#include "tools/ppo-step/train_command.hpp"

namespace ca::ppo_step {

struct AdvantageSettings {
  std::string estimator = "gae";
  double gamma = 1.0, lam = 0.95;
  bool whiten = true, grpo_norm_by_std = true;
};
// Reads every sequence record, computes over the batch (whitening and GRPO groups need all of it),
// writes each record back with advantages and returns; bad records pass with an error section.
int run_advantages(const CommonOptions& options, const AdvantageSettings& settings);

struct SampleSettings {
  std::string policy;
  int samples = 1;
  uint64_t seed = 0;
  nn::SampleOptions options;
  std::string device = "cpu";  // cpu, cuda or cuda:N (libcommon/nn_cuda, as agent-run's --policy-device)
  std::string dtype = "bf16";  // compute dtype on cuda
};

// Prompt record {prompt_token_ids, task_id or id, ...} -> one record per response: the prompt record's
// keys plus episode_id and an episode section with a user turn (the prompt) and an assistant turn
// (token ids and logprobs).
class Sampler {
 public:
  explicit Sampler(const SampleSettings& settings);
  std::vector<Json> responses(const Json& prompt);  // throws FieldError for a bad prompt record
  std::string summary() const;

 private:
  nn::SampleResult generate(const std::vector<int>& prompt, const nn::Decoder<float>* cpu_prompt_state);

  SampleSettings settings_;
  nn::Model<float> model_;
  std::unique_ptr<nn_cuda::Gpu> gpu_;  // with --device cuda: the model there, sampled there
  std::unique_ptr<nn_cuda::CudaModel> cuda_model_;
  std::mt19937_64 rng_;
  int64_t prompts_ = 0, responses_ = 0, tokens_ = 0;
  double seconds_ = 0;
};
// The `sample` subcommand's loop (several records out per record in).
int run_sample(const CommonOptions& options, const SampleSettings& settings);

// `tokenize`: what a training step would train on, per episode record: adds a `training_tokens`
// section {ids, mask (1 = model token), response_start, model_tokens, rendered}; rendered = the turns
// carried no token ids and were rendered with the policy's tokenizer and chat template.
int run_tokenize(const CommonOptions& options, const EpisodeFields& fields);

struct InitSettings {
  std::string config_path, out;
  bool critic = false;
  double std = nn::kInitStd;  // --std (--load-format dummy draws with this default)
  uint64_t seed = 0;
  std::string dtype;                    // bf16 | f32; "" = the config's torch_dtype (f32 when it names none)
  std::string max_shard_size = "5GB";  // as Hugging Face's max_shard_size
  int threads = 0;                      // writing threads; 0 = the machine's cores
};
void init_model(const InitSettings& settings);

// The subcommands (advantages, sample, tokenize, init, config) and their settings.
struct Subcommands {
  CLI::App *advantages = nullptr, *sample = nullptr, *tokenize = nullptr, *init = nullptr, *config = nullptr;
  AdvantageSettings adv;
  bool no_whiten = false, no_std_norm = false;
  SampleSettings sample_settings;
  std::string tok_policy;
  InitSettings init_settings;
};
// Each subcommand on the tool's app, with its options; `fields` takes tokenize's --group-field.
void add_subcommands(Cli& cli, Subcommands& s, EpisodeFields& fields);
// Runs the subcommand given and returns its exit status; nullopt when none was (the training step).
// `paths` gives tokenize a critic's tokenizer when the policy has none.
std::optional<int> run_subcommand(const CommonOptions& options, Subcommands& s, EpisodeFields fields,
                                  const StepPaths& paths, uint64_t seed);

}  // namespace ca::ppo_step
