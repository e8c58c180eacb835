// Client of the reference worker: one long-lived `python3 -m cuda_agent_worker` child per device,
// speaking JSON Lines (protocol: libcommon/python/cuda_agent_worker/PROTOCOL.md). PyTorch is reached
// only through it: task loading, seeded inputs, references, eager/compile baselines, task filters,
// AST similarity. Task code is untrusted and runs only in the child; no request ever hangs the caller.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "libcommon/jsonl.hpp"

namespace ca {

struct WorkerOptions {
  std::string device = "cpu";                          // "cpu" or "cuda:N"
  std::chrono::milliseconds request_timeout{120000};   // default per request; a hang is killed
  double cpu_seconds_limit = 600;                      // RLIMIT_CPU per request for task code
  std::size_t memory_limit_mb = 16384;                 // RLIMIT_AS (CPU) and a resident-set watch (both)
  std::chrono::milliseconds start_timeout{180000};     // for `import torch` and the hello line
  std::string python;                                  // interpreter; empty: find_python()
};

// One client owns one worker process; it is not thread-safe: give each thread (each -j slot) its own.
// The seed the task's Model is built with (its weights): the task's own `seed`, else 0. One per
// task, so kernel-check, kernel-prof and the worker's filters all see the same weights and a kernel
// cannot tell checking from timing by them.
int64_t task_init_seed(const Json& task);
// Every request's spelling is in requests.hpp (worker_request::load, inputs, reference, ...).

class WorkerClient {
 public:
  // Finds the interpreter and starts the child at once (so a missing torch or device is reported
  // before any work). Throws EnvironmentError (exit 3) when no python with torch is found, or when
  // device "cuda:N" is asked for and the worker sees no such GPU.
  explicit WorkerClient(WorkerOptions options = {});
  ~WorkerClient();
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  // Sends {"op":..., ...} (adds "id"), returns the answer object (always has "ok"). Never hangs:
  // on timeout the worker is killed and restarted and {"ok":false,"error":"timeout",...} returned;
  // on a dead worker it is restarted and {"ok":false,"error":"worker_died","detail":...}; over the
  // memory limit {"ok":false,"error":"memory_limit",...}. `load` requests are remembered by task_id
  // and replayed transparently when a restarted worker no longer knows the task.
  // GPU memory admission (one policy for every client of a device in this process): requests that
  // allocate on the GPU (load, inputs, reference, time, filters) run side by side; one that ran out
  // of GPU memory waits until no other is running on the device and is sent again alone (its answer
  // then has "memory_admission": "alone"). Workers give idle cached memory back after each request.
  Json request(const Json& request);
  Json request(const Json& request, std::chrono::milliseconds timeout);

  // Private dir (0700, under /dev/shm when present) for safetensors files; removed with the client.
  const std::string& temp_dir() const;
  // A fresh file name inside temp_dir(): "<stem>-<n>.safetensors".
  std::string temp_path(const std::string& stem);
  std::string python() const;  // interpreter in use
  // The worker's hello: {"torch_version","device","device_name","pid","cuda"...}.
  const Json& hello() const;
  int restarts() const;        // how many times the child was restarted after a death or timeout
  pid_t worker_pid() const;    // -1 when not running
  const WorkerOptions& options() const;

  // $CUDA_AGENT_PYTHON first, then python3 on PATH, /usr/bin/python3, /usr/local/bin/python3,
  // /opt/conda/bin/python3, /opt/*/bin/python3: the first that can `import torch` (result cached per
  // process). Throws EnvironmentError naming every candidate tried and why it failed.
  static std::string find_python();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One seeded trial, kept on the worker's GPU: the task's inputs for `seed` (kept under keys.inputs)
// and the reference's outputs on them (under keys.reference; with keys.params, the Model's
// parameters too). The one way the judges draw what a candidate is compared against: kernel-check's
// trials and kernel-prof's input sets.
struct TrialKeys {
  std::string inputs, reference;
  std::optional<std::string> params;
};
struct Trial {
  Json inputs, reference, params;  // shared tensors (IPC handles), as the worker answered
  double forward_ms = 0;           // the reference's own call on these inputs; 0 when not measured
  std::string failed;              // "" when drawn; else the request that failed: "inputs" or "reference"
  Json answer;                     // the failing request's answer
  bool ok() const { return failed.empty(); }
};
Trial draw_trial(WorkerClient& worker, const std::string& task_id, uint64_t seed, const TrialKeys& keys);

}  // namespace ca
