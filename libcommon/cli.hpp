// The command-line conventions every tool shares (CLI11): -i/-o with '-', --store/--no-store,
// --strict, --seed, --shard i/n, -v/-q, --version, and the mapping of errors to exit codes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/errors.hpp"

// CLI11 costs about 4 s of CPU in every file that includes it, so this header only names its
// types: a file that defines a command line (adds options, reads them) includes <CLI/CLI.hpp>.
namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace ca {

// Deterministic sharding by record key: a record belongs to shard (hash(key) mod count).
struct Shard {
  int index = 0;
  int count = 1;
  bool contains(const std::string& key) const;
  bool is_whole() const { return count == 1; }
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
  // "i/n"; throws UsageError on anything else.
  static Shard parse(const std::string& text);
  // SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT, else the whole input.
  static Shard from_environment();
};

struct CommonOptions {
  std::string tool;
  std::string input = "-";
  std::string output = "-";
  std::string store_path;  // empty: $CUDA_AGENT_STORE or ./cuda-agent.db
  bool no_store = false;
  bool strict = false;
  bool resume = false;
  std::optional<uint64_t> seed;
  std::string shard_text;
  Shard shard;
  int verbose = 0;
  bool quiet = false;
  std::vector<std::string> argv;

  std::string resolved_store_path() const;
  // The run's seed, one formula for every tool: --seed, else one drawn once per run
  // (unpredictable_seed, below 2^53) and logged under -v so the run can be reproduced.
  uint64_t run_seed() const;
  // For a tool where --resume has nothing to reuse: under --resume, a warning saying why.
  void resume_does_nothing(const std::string& why) const;

 private:
  mutable std::optional<uint64_t> drawn_seed_;
};

class Cli {
 public:
  // `example` is one real command line shown in --help; `see_also` names related tools.
  Cli(std::string tool, std::string summary, std::string example, std::string see_also = "");
  ~Cli();
  CLI::App& app() { return *app_; }
  CommonOptions& options() { return options_; }

  // Shared options on the app or on one of its subcommands.
  void add_io_options(CLI::App* target = nullptr);      // -i/--input, -o/--output
  void add_store_options(CLI::App* target = nullptr);   // --store, --no-store, --resume
  void add_record_options(CLI::App* target = nullptr);  // --strict, --shard
  void add_seed_option(CLI::App* target = nullptr);     // --seed
  void add_stream_options(CLI::App* target = nullptr);  // all four above

  // Parse argv, set up logging, run `body`; every ca::Error maps to its exit code, a CLI11 usage
  // error to 1, anything else to 4. Returns the exit code for main().
  int run(int argc, char** argv, const std::function<int()>& body);

 private:
  std::string tool_;
  std::unique_ptr<CLI::App> app_;
  CommonOptions options_;
};


// Logs a tool-level error on stderr: as an error, or as information when it is not a failure
// (OutputClosed, exit 0). Cli::run uses it for what reaches it; tools that catch Error to finish
// their summary use it too.
void report_error(const Error& e);

}  // namespace ca
