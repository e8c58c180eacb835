// The GPU stage of a check: one lane per GPU (a reference worker and a runner child), candidates
// judged on whichever lane is free. The plan is bound again to the tensors the worker loaded
// (libcommon/bundle/candidate.hpp's bind_candidate, the rules on the bound plan included);
// references are computed by the worker and compared here, in the parent.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/bundle/rules.hpp"
#include "tools/kernel-check/cpu_stage.hpp"
#include "tools/kernel-check/options.hpp"

namespace ca::kernel_check {

class GpuStage {
 public:
  GpuStage(const CheckOptions& options, const ca::bundle::Rules& rules, std::vector<int> gpus, uint64_t base_seed);
  ~GpuStage();
  size_t lanes() const;
  // Runs the warm call and the trials, compares, and sets p.check (status, reason, trials, ...).
  // Thread-safe: blocks until a lane is free.
  void judge(Prepared& p, const ca::Json& task, const std::string& task_id, const std::string& where);

 private:
  struct Lane;
  struct Judgment;  // one candidate judged on one lane (gpu_stage.cpp)
  void judge_on(Lane& lane, Prepared& p, const ca::Json& task, const std::string& task_id);
  const CheckOptions& options_;
  const ca::bundle::Rules& rules_;
  uint64_t base_seed_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<Lane*> free_;
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace ca::kernel_check
