// The per-GPU child: `kernel-check --runner --gpu N`, spoken to over pipes in JSON Lines. It holds
// the CUDA context, runs candidates with the bundle executor, and never sees reference outputs.
// A fault (illegal address, trap) kills only this process; the parent respawns it.
//
// Requests (one JSON object per line) and answers:
//   {"op":"load","cubin":F,"ptx":F,"lowered":{name:mangled},"plan":P,"io":IO,"params":F|null}
//       -> {"ok":true,"init_ms":x}
//   {"op":"run","inputs":F,"out":F,"guard_seed":N}
//       -> {"ok":true,"forward_ms":x,"inputs_changed":["inputs.0"],"guards":["wrote past the end of outputs.0 ..."]}
//   failures -> {"ok":false,"error":"runtime_error"|"plan_error"|"out_of_memory"|"bad_request","detail":"...","sticky":bool}
//   out_of_memory: the load could not have the memory the judge serves (load_failure_error).
//   after a sticky fault the runner answers and exits: its context is gone.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/process.hpp"

namespace ca::kernel_check {

int runner_main(int gpu);

// The error a failed load answers for a CUDA error `result`: "out_of_memory" (the node's: no verdict)
// only while the runner serves what the judge promised the plan (its buffers, within the scratch cap;
// the module, its module memory capped; the libraries' plans and workspaces) before any of the
// candidate's code has run; once its code runs (init's launches and library calls, the graph's
// capture), memory it asks for and cannot have is its own failure, "runtime_error" (its kernels'
// local memory is what a launch allocates).
std::string load_failure_error(bool candidate_code_ran, int result);

// "0,2" -> {0, 2}; empty -> all `count` devices. Throws UsageError.
std::vector<int> parse_gpu_list(const std::string& text, int count);

class RunnerClient {
 public:
  explicit RunnerClient(int gpu);
  // Sends one request; the answer, or {"ok":false,"error":"timeout"} (the child is killed) or
  // {"ok":false,"error":"crashed","detail":"killed by signal 11 ..."}. Starts the child when needed.
  ca::Json request(const ca::Json& req, std::chrono::milliseconds timeout);
  void kill();
  bool alive() { return child_ && child_->running(); }  // a child is up (a request would not start one)
  int restarts() const { return restarts_; }

 private:
  void start();
  int gpu_;
  std::unique_ptr<ca::ChildProcess> child_;
  int restarts_ = -1;
};

}  // namespace ca::kernel_check
