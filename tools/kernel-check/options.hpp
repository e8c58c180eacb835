// kernel-check's own options (the shared ones come from ca::Cli).
#pragma once
#include <string>
#include <vector>

namespace ca::kernel_check {

struct CheckOptions {
  bool compile_only = false;
  std::string arch;          // empty: the device's, or sm_90 without one
  std::string rules_path;   // empty: the shipped default
  std::string tasks_path;    // JSONL of task records, by task_id
  std::string cache_dir;
  bool no_cache = false;
  // calibrated (the claimed precision's own error on the task, bundle/compare.hpp), published
  // (atol=rtol=1e-2, norm 5e-2) or strict (1e-4 for fp32)
  std::string tolerance = "calibrated";
  bool allow_stochastic = false;      // judge tasks whose reference is stochastic (else task_stochastic)
  double atol = -1, rtol = -1;        // overrides
  int trials = 5;                     // fresh-input trials after the warm call (>= 5)
  std::string gpus;                   // "0,1"; empty: all visible
  std::size_t worker_memory_mb = 0;   // all reference workers together (one per GPU); 0: 3/4 of RAM, <= 16 GiB each
  bool one_task_per_worker = false;   // a service's --accept-tasks: a fresh worker process per task (clients' code)
  double timeout_s = 0;               // per call; 0: scaled from the task's eager time, >= 2 s
  int jobs = 2;                       // compile threads
  bool graph = true;                  // forward calls as CUDA graph replays, as kernel-prof times them
  double lock_timeout_s = 600;        // waiting for a GPU kernel-prof is timing on (the node's per-GPU lock)
  bool runner = false;                // internal: the per-GPU child
  int runner_gpu = 0;
};

}  // namespace ca::kernel_check
