// --gpus with several ordinals: one kernel-prof child per GPU, each record to the next free one, output
// written in input order (so a pipeline downstream sees the same stream as with one GPU).
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/cli.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/process.hpp"
#include "tools/kernel-prof/options.hpp"

namespace ca::kernel_prof {

// The child's argv: ours without --gpus, -i/-o, --shard and --worker-memory, plus --gpus <ordinal>
// -i - -o - --shard 0/1 --worker-memory <its worker's share in MiB>.
std::vector<std::string> child_argv(const std::vector<std::string>& argv, int ordinal, std::size_t worker_memory_mb);
int run_on_gpus(const ProfOptions& options, const CommonOptions& common, int argc, char** argv);

// How a child says "a candidate killed my GPU context; every record I was given before this one is
// answered": it exits with this status when asked for the next record (CUDA gives a process no way
// back to a working context). Only between kernel-prof and its own children; never a user's status.
inline constexpr int kExitContextLost = 75;
// Set in a child's environment: it exits kExitContextLost rather than starting a child of its own.
inline constexpr const char* kChildEnv = "CA_KERNEL_PROF_CHILD";
bool is_child();

// A kernel-prof child timing on one GPU, one record at a time. A child that lost its context to a
// candidate is replaced by a fresh one and asked again, so one faulting kernel costs its own record
// (answered as failed) and a process start, never the records after it.
class GpuChild {
 public:
  // `own_store`: the child opens the run store (the --gpus lanes); otherwise --no-store (and no
  // --resume, --serve): the caller stores what it answers.
  // `worker_memory_mb`: the child's reference worker's share of --worker-memory.
  GpuChild(const CommonOptions& common, int gpu, bool own_store, std::size_t worker_memory_mb);
  ~GpuChild();
  // The child's answer line to `record`. InternalError when it ended early otherwise (ended_status()
  // is then its exit status).
  std::string ask(const Json& record);
  void close_stdin();
  std::optional<int> wait(std::chrono::milliseconds timeout);
  int ended_status() const { return ended_; }
  int restarts() const { return restarts_; }

 private:
  SpawnOptions spawn_;
  int gpu_;
  std::unique_ptr<ChildProcess> child_;
  int ended_ = 0, restarts_ = 0;
};

}  // namespace ca::kernel_prof
