// One opened GPU for kernel-prof: identity, primary context, a stream, the L2 flusher, and the
// reference worker on the same device (started on first need).
#pragma once
#include <cuda.h>

#include <map>
#include <memory>
#include <string>

#include "libcommon/bundle/executor.hpp"
#include "libcommon/measure/gpu_state.hpp"
#include "libcommon/worker/worker_client.hpp"

namespace ca::kernel_prof {

class GpuSession {
 public:
  // Throws EnvironmentError (exit 3) without a driver or that GPU.
  // `trace`: open CUPTI (not under ncu, which owns it in --replay-once).
  explicit GpuSession(int ordinal, bool trace = true);
  // The reference worker's memory limit in MiB (0: worker_memory_share_mb(0, 1)); before worker().
  void set_worker_memory_mb(std::size_t mb) { worker_memory_mb_ = mb; }
  void set_one_task_per_worker(bool on) { one_task_per_worker_ = on; }
  ~GpuSession();
  const measure::GpuIdentity& identity() const { return id_; }
  CUstream stream() const { return stream_; }
  // The device's primary context: the candidate's (its executor, its buffers).
  CUcontext context() const { return ctx_; }
  // The context the tool's own kernels that judge a candidate (the output compare) run in:
  // bundle::tool_context() of this device (the executor's fingerprint runs there too),
  // never given to a candidate. Not a wall (contexts of one process share a GPU address space): its
  // buffers are written after the candidate's last kernel of a call and read before the next.
  // Made with the session; reading them changes no current context (the callers switch to it with
  // cuda::ContextSwitch, whose 'before' must be the candidate's context, and launch on its stream
  // while it is current: session 19's 7c01437 read the stream inside the switch when the getter
  // made the primary context current again, and every compare failed CUDA_ERROR_INVALID_HANDLE).
  CUcontext trusted_context() const { return trusted_.ctx; }
  CUstream trusted_stream() const { return trusted_.stream; }
  measure::L2Flusher& flusher() { return *flusher_; }
  void make_current() const;
  // The worker on cuda:<ordinal>; EnvironmentError when no python with torch and CUDA is found.
  worker::WorkerClient& worker();
  bool worker_started() const { return worker_ != nullptr; }
  std::string torch_version();
  // Worker `load` answers by task_id (the worker keeps the task; the client replays it after a restart).
  std::map<std::string, Json> loaded_tasks;
  // Baselines timed in this session, by cache key text: a service (or a run without a store) times
  // a task's baselines once, not once per candidate.
  std::map<std::string, Json> baselines;
  // A candidate's kernels killed this process's context (a sticky error: an illegal address, a trap).
  // Nothing more runs on it: CUDA gives a process no way back, so the records after it are timed by a
  // fresh process (multi_gpu.hpp's GpuChild), and `why` says what ended it.
  void mark_dead(std::string why) { dead_ = std::move(why); }
  bool dead() const { return !dead_.empty(); }
  const std::string& why_dead() const { return dead_; }

 private:
  std::string dead_;
  measure::GpuIdentity id_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  bundle::ToolContext trusted_;
  std::unique_ptr<measure::L2Flusher> flusher_;
  std::unique_ptr<worker::WorkerClient> worker_;
  std::size_t worker_memory_mb_ = 0;
  bool one_task_per_worker_ = false;
};

}  // namespace ca::kernel_prof
