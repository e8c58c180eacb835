// ppo-step's training step (no subcommand): episode records in, one metrics line out, the new
// checkpoint written.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "libcommon/cli.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"
#include "tools/ppo-step/backend.hpp"
#include "tools/ppo-step/records.hpp"
#include "tools/ppo-step/trainer.hpp"

namespace ca::ppo_step {

struct TrainSettings {
  StepPaths paths;
  std::string config_path;  // --config YAML
  EpisodeFields fields;
  DeviceOptions device;
  bool empty_ok = false;    // --empty-ok: nothing kept to train on is not an error
};

// The step's options, on the tool's top-level app.
void add_train_options(CLI::App& app, TrainSettings& settings);
// The policy's tokenizer (the critic's in value-pretrain without --policy): it renders episodes
// that came without token ids (the replay policy, a server that returned none). Empty when neither
// checkpoint has a tokenizer.json.
std::optional<tokenizer::Tokenizer> render_tokenizer(const StepPaths& paths);
// Reads the batch (bad records left out, or fatal under --strict), trains, writes the metrics line
// and the store's rows. Returns the exit status.
int run_train(const CommonOptions& options, TrainSettings& settings, uint64_t seed);

}  // namespace ca::ppo_step
