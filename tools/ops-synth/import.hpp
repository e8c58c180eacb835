// ops-synth import: KernelBench problem directories (level folders of .py files) and
// CUDA-Agent-Ops-6K JSONL rows (ops, data_source, code) become task records, specs from the worker.
#pragma once
#include <string>
#include <vector>

#include "libcommon/cli.hpp"

namespace ca::ops_synth {

struct ImportOptions {
  std::vector<std::string> sources;  // directories of .py files, .py files, or .jsonl files ('-' = stdin)
  std::string device = "cpu";
  bool no_worker = false;  // records without the worker's specs (no torch needed)
  int jobs = 1;
  double timeout_s = 300;
  std::size_t worker_memory_mb = 0;  // all workers together (each gets 1/jobs); 0: 3/4 of RAM, <= 16 GiB each
  void register_with(CLI::App* app);
};

int run_import(const ca::CommonOptions& common, const ImportOptions& options);

}  // namespace ca::ops_synth
