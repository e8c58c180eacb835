// Baselines (eager, torch.compile) timed by the reference worker with kernel-prof's method, and
// cached in the store by (task, GPU, driver, torch version, method).
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"
#include "libcommon/store.hpp"
#include "tools/kernel-prof/gpu_session.hpp"
#include "tools/kernel-prof/options.hpp"

namespace ca::kernel_prof {

// The method part of the cache key: what changes the expected value of a baseline timing.
std::string baseline_method(const std::string& mode, const std::string& precision, const std::string& metric,
                            int input_sets, double flush_factor);

class BaselineTimer {
 public:
  BaselineTimer(GpuSession& gpu, Store* store, const ProfOptions& options)
      : gpu_(gpu), store_(store), options_(options) {}
  // Loads the task into the worker once per session; returns the worker's load answer (specs).
  Json load_task(const Json& task);
  // {mode, precision, time_us (the metric asked for), event_time_us, device_time_us, compile_s,
  //  method, cached} or {mode, precision, error, detail} when the worker could not time it.
  Json time(const std::string& task_id, const std::string& mode, const std::string& precision,
            const std::string& metric, int input_sets);

 private:
  GpuSession& gpu_;
  Store* store_;
  const ProfOptions& options_;
};

}  // namespace ca::kernel_prof
