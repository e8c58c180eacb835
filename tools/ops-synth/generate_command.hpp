// ops-synth generate: the subcommand's options, its capacity check and its loop.
#pragma once
#include <cstdint>
#include <string>

#include "libcommon/cli.hpp"
#include "tools/ops-synth/generate.hpp"

namespace ca::ops_synth {

struct GenerateCommand {
  int64_t n = 100;
  std::string catalog_path, mix_text, ops_text;
  GenOptions gen;
  CLI::App* app = nullptr;  // the subcommand, once registered
  void register_with(Cli& cli);
};
// Writes `n` tasks (this shard's), each committed to the store before it is on stdout.
int run_generate(const CommonOptions& common, GenerateCommand& cmd);

}  // namespace ca::ops_synth
