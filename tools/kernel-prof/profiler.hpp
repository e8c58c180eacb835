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
  // --resume: the stored profile of this candidate when it was timed as this run would time it
  // (its timed_by is this run's), else nullopt.
  std::optional<Json> stored_profile(const Json& record, const std::string& task_key);
  // The kind of GPU this run times on ({name, arch}, read without a context), or null on a host
  // without one.
  Json gpu_kind();
  GpuSession& gpu();
  // gpu(), or an EnvironmentError (exit 3) saying a record that passed its check needs one.
  GpuSession& timing_gpu();
  Outcome profile_in_child(Json& record, const std::string& task_id);
  // Times the record's candidate on this process's GPU (profile's work once the task is known).
  Outcome profile_here(Json& record, const Json& task, const std::string& task_id, const std::string& task_key);

  const ProfOptions& options_;
  const CommonOptions& common_;
  Store* store_;
  TaskLookup tasks_;  // the record's task, --tasks, the store
  std::unique_ptr<GpuSession> gpu_;
  std::unique_ptr<GpuChild> child_;
  bool child_allowed_ = false;
  std::optional<Json> gpu_kind_;  // gpu_kind(), asked once
};

// Whether the record's check passed: false without a `check` section; FieldError when `check`
// lacks a boolean `correct`.
bool check_passed(const Json& record);

// What timed a profile (its prof.timed_by): the content id of the task as the worker loads it
// (`task_key`, worker::request::task_key), the candidate (its id and its bundle's content), what of
// the record's check the timing reads (the tolerance mode, its calibration, the claimed precision),
// every option that changes the numbers or the verdict (metric, baselines, the stop rule and
// budgets, warm-up, input sets, margin and remeasure rounds, the seed when one is given, CUPTI off,
// --metrics), the kind of GPU (`gpu_kind`: {name, arch}) and the build (build_identity). --resume reuses a stored
// profile only when its timed_by is this; a profile stored before timed_by has none and is timed again.
std::string timed_by(const ProfOptions& options, const std::string& task_key, const Json& record, const Json& gpu_kind);

// {name, arch} of a GPU's identity (what timed_by names of it).
Json gpu_kind_of(const Json& identity);

}  // namespace ca::kernel_prof
