// Shared CLI conventions.
#include "libcommon/cli.hpp"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "libcommon/child_main.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/file_identity.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/signals.hpp"
#include "ca/version.hpp"

namespace ca {

bool Shard::contains(const std::string& key) const {
  if (count <= 1) return true;
  // The first 15 hex digits of sha256 fit an int64; the same key lands in the same shard everywhere.
  uint64_t h = std::stoull(sha256_hex(key).substr(0, 15), nullptr, 16);
  return static_cast<int>(h % static_cast<uint64_t>(count)) == index;
}

Shard Shard::parse(const std::string& text) {
  auto slash = text.find('/');
  Shard s;
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    std::size_t used = 0;
    s.index = std::stoi(text.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("index");
    std::string rest = text.substr(slash + 1);
    s.count = std::stoi(rest, &used);
    if (used != rest.size()) throw std::invalid_argument("count");
  } catch (const std::exception&) {
    throw UsageError("--shard: expected i/n (for example 0/4), got '" + text + "'");
  }
  if (s.count < 1 || s.index < 0 || s.index >= s.count)
    throw UsageError("--shard: need 0 <= i < n, got '" + text + "'");
  return s;
}

Shard Shard::from_environment() {
  const char* id = std::getenv("SLURM_ARRAY_TASK_ID");
  const char* count = std::getenv("SLURM_ARRAY_TASK_COUNT");
  if (!id || !count) return Shard{};
  const char* min = std::getenv("SLURM_ARRAY_TASK_MIN");
  int index = std::atoi(id) - (min ? std::atoi(min) : 0);
  return parse(std::to_string(index) + "/" + count);
}

uint64_t CommonOptions::run_seed() const {
  if (seed) return *seed;
  if (!drawn_seed_) {
    drawn_seed_ = unpredictable_seed();
    log::verbose("seed ", *drawn_seed_, " (--seed ", *drawn_seed_, " reproduces this run)");
  }
  return *drawn_seed_;
}

void CommonOptions::resume_does_nothing(const std::string& why) const {
  if (resume) log::warn("--resume does nothing for ", tool, ": ", why);
}

std::string CommonOptions::resolved_store_path() const {
  if (!store_path.empty()) return store_path;
  if (const char* env = std::getenv("CUDA_AGENT_STORE"); env && *env) return env;
  return "cuda-agent.db";
}

Cli::Cli(std::string tool, std::string summary, std::string example, std::string see_also)
    : tool_(tool), app_(std::make_unique<CLI::App>(summary, tool)) {
  options_.tool = tool;
  log::set_tool(tool);
  std::string footer = "Example:\n  " + example + "\n";
  if (!see_also.empty()) footer += "\nSee also: " + see_also + "\n";
  footer += "\nExit codes: 0 ok, 1 usage, 2 bad input, 3 environment (no GPU, driver, torch), 4 internal.";
  app_->footer(footer);
  app_->set_version_flag("--version", std::string(tool) + " " + kVersion + " (git " + kGitRevision + ")");
  app_->add_flag("-v,--verbose", options_.verbose, "More detail on stderr (repeat for debug)");
  app_->add_flag("-q,--quiet", options_.quiet, "Only errors on stderr");
}

Cli::~Cli() = default;

void Cli::add_io_options(CLI::App* target) {
  CLI::App& a = target ? *target : *app_;
  a.add_option("-i,--input", options_.input, "Input JSON Lines ('-' = stdin)")->capture_default_str();
  a.add_option("-o,--output", options_.output, "Output JSON Lines ('-' = stdout)")->capture_default_str();
}

void Cli::add_store_options(CLI::App* target) {
  CLI::App& a = target ? *target : *app_;
  a.add_option("--store", options_.store_path, "Run store (SQLite); default $CUDA_AGENT_STORE or ./cuda-agent.db");
  a.add_flag("--no-store", options_.no_store, "Do not open a run store (pure pipe)");
  a.add_flag("--resume", options_.resume, "Skip records whose result is already in the store");
}

void Cli::add_record_options(CLI::App* target) {
  CLI::App& a = target ? *target : *app_;
  a.add_flag("--strict", options_.strict, "A record with a missing or mistyped field is fatal (exit 2)");
  a.add_option("--shard", options_.shard_text,
               "Process shard i of n (i/n); default from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT");
}

void Cli::add_seed_option(CLI::App* target) {
  CLI::App& a = target ? *target : *app_;
  a.add_option("--seed", options_.seed, "Seed (default: unpredictable, recorded in the output)");
}

void Cli::add_stream_options(CLI::App* target) {
  add_io_options(target);
  add_store_options(target);
  add_record_options(target);
  add_seed_option(target);
}

void report_error(const Error& e) {
  if (e.exit_code == kExitOk) log::info(e.what());  // OutputClosed: the reader has what it wanted
  else log::error(e.what());
}

namespace {

// Opening -o truncates it before the first record is read: `-i F -o F` would empty F and exit 0
// (also through a symlink, or with F on stdin or stdout: `-o F < F`, `-i F >> F`).
void refuse_same_input_and_output(const CommonOptions& o) {
  bool in_file = o.input != "-" && !o.input.empty(), out_file = o.output != "-" && !o.output.empty();
  bool same = (in_file && out_file && same_file(o.input, o.output)) ||
              (!in_file && out_file && same_file(STDIN_FILENO, o.output)) ||
              (in_file && !out_file && same_file(STDOUT_FILENO, o.input));
  if (same)
    throw UsageError("input and output are the same file (" + (in_file ? o.input : o.output) +
                     "): writing would destroy what is read; write to another file and rename it");
}

}  // namespace

int Cli::run(int argc, char** argv, const std::function<int()>& body) {
  // A helper child that is this program again (the confined NVRTC compiler: child_main.hpp).
  if (ChildMain child = child_main_for(argc, argv)) return child();
  // A closed stdout shows up as EPIPE on write (OutputClosed), the same in every tool, instead of
  // SIGPIPE killing some tools and not others (those with worker children ignore it already).
  signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < argc; ++i) options_.argv.emplace_back(argv[i]);
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app_->help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp& e) {
    std::cout << app_->help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    log::error(e.what());
    std::cerr << "Run '" << tool_ << " --help' for usage.\n";
    return kExitUsage;
  }
  log::set_level(options_.quiet ? log::kQuiet : options_.verbose);
  // SIGINT/SIGTERM/SIGHUP: children stopped, temp dirs removed, run rows closed, exit 128+signal.
  signals::install();
  int code;
  try {
    options_.shard = options_.shard_text.empty() ? Shard::from_environment() : Shard::parse(options_.shard_text);
    refuse_same_input_and_output(options_);
    code = body();
  } catch (const Error& e) {
    signals::wait_if_stopping();  // the error came from the signal path stopping the children
    report_error(e);
    code = e.exit_code;
  } catch (const std::exception& e) {
    signals::wait_if_stopping();
    log::error("internal error: ", e.what());
    code = kExitInternal;
  }
  signals::wait_if_stopping();
  signals::run_cleanups(code);  // run rows left open (an error before end_run) get the true status
  return code;
}

}  // namespace ca
