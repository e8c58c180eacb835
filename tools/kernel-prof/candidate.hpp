// Timing one candidate bundle: compiled (NVRTC, cached) and bound with the shared bundle library,
// one executor per input set with its forward steps captured in a CUDA graph, the timing loop of
// libcommon/measure, and the outputs of the timed calls checked against the reference worker's.
#pragma once
#include <cuda.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libcommon/bundle/executor.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/measure/timing_loop.hpp"
#include "tools/kernel-prof/gpu_session.hpp"
#include "tools/kernel-prof/options.hpp"

namespace ca::prof {

// One input set, kept on the GPU by the reference worker: descriptions of its device tensors
// (libcommon/cuda/ipc.hpp), valid until the set is released.
struct InputSet {
  uint64_t seed = 0;
  Json inputs, reference;  // {"inputs.0": {dtype, shape, bytes, handle, offset}, ...}, {"outputs.0": ...}
};

// The candidate ready to run: one executor and one graph per input set, params uploaded, init run.
class CandidateBench : public measure::TimedTarget {
 public:
  // Throws bundle::PlanError, CudaError, FieldError (record lacks its bundle), or
  // std::runtime_error("compile: ...") when the bundle no longer compiles.
  // `guard_seed` fills every set's guard zones (as kernel-check does before each of its calls).
  // `params` and every set's `inputs` are the worker's device tensors: copied in, then unmapped.
  CandidateBench(const Json& bundle, const Json& loaded, const std::string& arch, const Json& params,
                 const std::vector<InputSet>& sets, uint32_t guard_seed);
  ~CandidateBench() override;
  int input_sets() const override { return int(executors_.size()); }
  // Untimed, before every call: the set's call state reset (forward scratch poisoned, module
  // globals restored: Executor::reset_call_state) and its outputs poisoned (NaN bytes).
  void prepare(int set, CUstream stream) override;
  void enqueue(int set, CUstream stream) override;  // replay the set's graph
  bundle::Executor& executor(int set) { return *executors_[set]; }
  // After the timed calls: what any of them left where no call may write (guard zones, inputs,
  // params, init's scratch), or "" when nothing.
  std::string state_violation(int set);

 private:
  uint32_t guard_seed_;
  std::vector<std::map<std::string, std::string>> read_only_;  // per set: ref -> sha256 before timing
  std::vector<std::unique_ptr<bundle::Executor>> executors_;
  std::vector<CUgraphExec> graphs_;
  std::vector<std::vector<std::pair<CUdeviceptr, size_t>>> outputs_;  // per set
};

struct CandidateTiming {
  measure::LoopResult loop;
  int input_sets = 0;
  bool outputs_ok = true;
  std::string failure;  // what was wrong when timed
  Json outputs_check = Json::array();  // per input set: {set, seed, ok, max_abs_err, ...}
  Json params;                         // the worker's device params (kept for --metrics' replay)
  std::vector<InputSet> sets;
  std::vector<std::string> keys;       // what the worker keeps for this timing, released by the caller
};

// Asks the worker for the input sets (seeds options.seed + k) and their reference outputs, kept on
// the GPU under fresh keys (appended to `keys`); the params too when `params` is given.
std::vector<InputSet> make_input_sets(GpuSession& gpu, const std::string& task_id, int count, uint64_t seed, Json* params,
                                      std::vector<std::string>& keys);

// `loaded` is the worker's load answer for the task (tensor specs). Never throws for a candidate
// that goes wrong when timed: outputs_ok false and `failure` say what happened.
CandidateTiming time_candidate(GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
                               const ProfOptions& options);

// Releases what the worker keeps for a timing (never throws).
void release_sets(GpuSession& gpu, const CandidateTiming& timing);

}  // namespace ca::prof
