// ppo-step's training step (no subcommand): episode records in, one metrics line out, the new
// checkpoint written.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// The step's options, on the tool's top-level app; returns them for refuse_train_options.
std::vector<CLI::Option*> add_train_options(CLI::App& app, TrainSettings& settings);
// The step's options reach a subcommand's command line too (the app falls through, for -v/-q and the
// shared options), where nothing reads them: `ppo-step advantages --config c.yaml` would run without
// c.yaml. A usage error (exit 1) names the first one given with a subcommand.
void refuse_train_options(const CLI::App& app, const std::vector<CLI::Option*>& train_options);
// The policy's tokenizer (the critic's in value-pretrain without --policy): it renders episodes
// that came without token ids (the replay policy, a server that returned none). Empty when neither
// checkpoint has a tokenizer.json.
std::optional<tokenizer::Tokenizer> render_tokenizer(const StepPaths& paths);
// Reads the batch (bad records left out, or fatal under --strict), trains, writes the metrics line
// and the store's rows. Returns the exit status.
int run_train(const CommonOptions& options, TrainSettings& settings, uint64_t seed);

}  // namespace ca::ppo_step
