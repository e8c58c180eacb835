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
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::worker {

// Task code is confined (the worker applies what its client prepares, before its first request;
// libcommon/confine.hpp): it reads only the interpreter's and the system's libraries (and the
// device's files), writes only beneath the client's private folder (temp_dir()), opens no network
// socket, stays in the worker's process group (killed with it, whatever way the worker ends), and
// its output (fd 1 and 2) goes to a log capped at output_cap_bytes. The hello's "confinement" names
// what was applied ("landlock", "seccomp", "no-caps", "rlimit", "pgroup", "output-cap"); a piece the
// kernel lacks is left out, warned about and listed in "confinement_warnings".
struct WorkerOptions {
  std::string device = "cpu";                          // "cpu" or "cuda:N"
  std::chrono::milliseconds request_timeout{120000};   // default per request; a hang is killed
  double cpu_seconds_limit = 600;                      // RLIMIT_CPU per request for task code
  // RLIMIT_AS (CPU) and a watch (both) of the resident sets of the worker's process group plus the
  // bytes in its folder; every file it writes is bound by it too. 0: worker_memory_share_mb(0, 1).
  std::size_t memory_limit_mb = 0;
  std::chrono::milliseconds start_timeout{180000};     // for `import torch` and the hello line
  std::string python;                                  // interpreter; empty: find_python()
  std::vector<std::string> read_dirs;                  // more folders task code may read (--decontaminate)
  std::vector<std::string> write_dirs;                 // more folders it may write (requests' own "out" paths)
  std::size_t output_cap_bytes = 4 << 20;              // of its log; the rest is dropped and the cut marked
  bool confine = true;                                 // false (or CUDA_AGENT_WORKER_CONFINE=off): none, warned
  // One task's code per worker process: a request carrying task code (load, filters) other than the
  // code this process has already run is sent to a fresh worker. Task code shares the interpreter
  // with every task loaded after it (torch, its modules and classes, global flags), so one task that
  // patches torch would change every later task's reference; no check of what it changed can be
  // complete, a new process is. For tasks nobody vouched for (ops-synth filter and import, a service's
  // --accept-tasks). The fresh worker gets its folder anew (no cache or file the last task left) and
  // no cache folder the user named (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR: other tasks write
  // them). Fresh starts are not counted in restarts().
  bool one_task_per_process = false;
};

// A failed answer that failed for want of GPU memory even when sent again alone (request()'s
// retry): the device could not hold the request beside what else holds memory there (a candidate's
// buffers, for the judges, which then end the candidate and ask again). The one reading of
// "memory_admission": "alone" for every caller.
bool out_of_memory_alone(const Json& answer);

// Each worker's memory limit when `workers` of them share `total_mb` (0: three quarters of this
// host's memory, and at most 16 GiB each). At least 1 MiB.
std::size_t worker_memory_share_mb(std::size_t total_mb, int workers);

// One client owns one worker process; it is not thread-safe: give each thread (each -j slot) its own.
// The seed the task's Model is built with (its weights): the task's own `seed`, else 0. One per
// task, so kernel-check, kernel-prof and the worker's filters all see the same weights and a kernel
// cannot tell checking from timing by them.
int64_t task_init_seed(const Json& task);
// Every request's spelling is in requests.hpp (worker::request::load, inputs, reference, ...).

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

  // Private dir (0700, under /dev/shm when present) for safetensors files, the one folder the
  // worker may write; removed with the client.
  const std::string& temp_dir() const;
  // The worker's log (its fd 1 and 2, capped): the last `max_bytes` of it.
  std::string log_tail(std::size_t max_bytes = 2000) const;
  // A fresh file name inside temp_dir(): "<stem>-<n>.safetensors".
  std::string temp_path(const std::string& stem);
  std::string python() const;  // interpreter in use
  // The worker's hello: {"torch_version","device","device_name","pid","cuda"...}.
  const Json& hello() const;
  // What confines its task code, for the records it judges: {"applied": [...], "warnings": [...]}
  // from the hello (empty lists before the worker has started).
  Json confinement() const;
  int restarts() const;        // how many times the child was restarted after a death or timeout
  // How many worker processes have started (fresh starts and restarts). A caller that keeps what a
  // task's load answered keeps it with this number: under one_task_per_process a later process
  // holds no earlier task, and making it load one empties the folder of temp_path() first.
  int spawns() const;
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

}  // namespace ca::worker
