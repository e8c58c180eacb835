// ops-synth filter: the published task filters run by the reference worker (eager and compile
// runs, determinism, non-degenerate outputs, eager time range) plus decontamination against
// KernelBench-format problems by AST similarity; -j N workers, output in input order.
#pragma once
#include <string>
#include <vector>

#include "libcommon/cli.hpp"

namespace ca::ops_synth {

struct FilterOptions {
  int jobs = 1;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N[,cuda:M]
  double min_ms = 1, max_ms = 100;
  bool check_compile = true;
  bool keep_rejected = false;
  std::vector<std::string> decontaminate;  // dirs of KernelBench-format .py problems
  double threshold = 0.9;
  double timeout_s = 300;
  int memory_retries = 4;      // a verdict lost to GPU memory (other workers' share) is asked again
  double memory_wait_s = 10;   // after this many seconds, doubling each time
  std::size_t worker_memory_mb = 0;  // all workers together (each gets 1/jobs); 0: 3/4 of RAM, <= 16 GiB each
  void register_with(CLI::App* app);
};

int run_filter(const ca::CommonOptions& common, const FilterOptions& options);

}  // namespace ca::ops_synth
