// The profiler: for each record whose check passed, time the candidate and its task's baselines
// on one GPU and add the `prof` section; other records pass through untouched.
#pragma once
#include <map>
#include <optional>
#include <memory>
#include <string>

#include "libcommon/cli.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"
#include "libcommon/task_lookup.hpp"
#include "tools/kernel-prof/options.hpp"

namespace ca::kernel_prof {

class GpuSession;  // the opened GPU, its lock, stream, L2 flusher and reference worker
class GpuChild;    // a kernel-prof child (multi_gpu.hpp)

class Profiler {
 public:
  Profiler(const ProfOptions& options, const CommonOptions& common, Store* store);
  ~Profiler();
  // Adds `prof` (status "timed" or "failed") to a record whose check passed; returns passed for
  // every other record, untouched. Throws EnvironmentError when a record needs the GPU and there is
  // none; FieldError for a record missing what it needs.
  Outcome profile(Json& record);
  // Opens the GPU, starts its reference worker and pays the worker's one-time costs of a first
  // timing (torch.profiler's start, and torch.compile's when a compile baseline is asked for) now
  // rather than at the first passing record: a service before its first request, a stream while its
  // first record is still being checked. EnvironmentError without a GPU or torch.
  void warm_up();
  // The GPU opened ({ordinal, name, uuid, ...}), or null before it is.
  Json gpu_json() const;
  // After a candidate killed this process's GPU context, the records still to come are timed by a
  // kernel-prof child (a stream); a service says so instead (EnvironmentError: restart it).
  void set_child_after_context_loss(bool allowed) { child_allowed_ = allowed; }

 private:
  Json find_task(const Json& record, const std::string& task_id);
  std::optional<Json> stored_profile(const std::string& candidate_id);  // --resume
  GpuSession& gpu();
  // gpu(), or an EnvironmentError (exit 3) saying a record that passed its check needs one.
  GpuSession& timing_gpu();
  Outcome profile_in_child(Json& record, const std::string& task_id);

  const ProfOptions& options_;
  const CommonOptions& common_;
  Store* store_;
  TaskLookup tasks_;  // the record's task, --tasks, the store
  std::unique_ptr<GpuSession> gpu_;
  std::unique_ptr<GpuChild> child_;
  bool child_allowed_ = false;
};

// Whether the record's check passed: false without a `check` section; FieldError when `check`
// lacks a boolean `correct`.
bool check_passed(const Json& record);

}  // namespace ca::kernel_prof
