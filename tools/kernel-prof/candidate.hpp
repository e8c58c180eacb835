// Timing one candidate bundle: compiled (NVRTC, cached) and bound with the shared bundle library,
// one executor with its forward steps captured in a CUDA graph, the timing loop of
// libcommon/measure, and a random subset of the timed calls checked against the reference worker.
//
// No input set is timed twice (DESIGN.md §5): before every call, checked or timed, untimed like the
// L2 flush, the reference worker draws a fresh set on the GPU from the task's own get_inputs() with
// a seed no earlier call used, and it is copied into the candidate's input buffers. A cache kept
// anywhere (module memory, the heap, shared memory, a channel nobody has found yet) is keyed on
// values that never come back, so it never hits. Which calls are checked is drawn after the
// inputs, from a generator the kernel never sees, and every call does the same untimed work
// before it runs (the same draw, copy and fingerprint of its inputs), so nothing a kernel can
// observe tells a checked call from an unchecked one.
#pragma once
#include <cuda.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "libcommon/bundle/candidate.hpp"
#include "libcommon/bundle/executor.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/measure/timing_loop.hpp"
#include "tools/kernel-prof/gpu_session.hpp"
#include "tools/kernel-prof/options.hpp"

namespace ca::kernel_prof {

// One input set, kept on the GPU by the reference worker: descriptions of its device tensors
// (libcommon/cuda/ipc.hpp), valid until the set is released.
struct InputSet {
  uint64_t seed = 0;
  Json inputs, reference;  // {"inputs.0": {dtype, shape, bytes, handle, offset}, ...}, {"outputs.0": ...}
};

// Where the inputs of each call come from, and what is done with a call once it has run.
class CallInputs {
 public:
  virtual ~CallInputs() = default;
  // The device tensors of call `call`'s inputs (worker descriptions); called before the call.
  virtual Json draw(int64_t call) = 0;
  // After the call has run (its stream synchronized): `check` says whether to compare its outputs
  // with the reference. Returns "" or what was wrong.
  virtual std::string finish(int64_t call, bool check, bundle::Executor& ex) = 0;
};

// The candidate ready to run: one executor, params uploaded, init run, forward captured.
class CandidateBench : public measure::TimedTarget {
 public:
  // The bundle on the candidate path (libcommon/bundle/candidate.hpp) for `arch`, bound to the
  // tensors the worker loaded (`loaded`). Throws CudaError, or Refused with the path's
  // refusal ("compile_error: ...", "plan_error: ...", "policy_violation: ...") when the bundle does
  // not compile, bind or keep `rules` (null: none applied; only the replay, whose parent applied them).
  // `guard_seed` fills the guard zones (as kernel-check does before each of its calls).
  // `params` are the worker's device tensors: copied in, then unmapped.
  CandidateBench(bundle::BundleSources sources, const Json& loaded, const std::string& arch, const Json& params,
                 CallInputs& inputs, uint32_t guard_seed, double check_fraction, uint64_t pick_seed,
                 const bundle::Rules* rules);
  ~CandidateBench() override;
  int input_sets() const override { return 1; }  // one set of buffers, fresh values every call
  // Untimed, before every call: the previous call finished (and checked when drawn so), fresh
  // inputs copied in and fingerprinted, the call state reset (Executor::reset_call_state), outputs
  // filled with bytes drawn for the call. Throws CallFailed when a checked call was wrong.
  void prepare(int set, CUstream stream) override;
  void enqueue(int set, CUstream stream) override;  // replay the graph
  // After the loop: the last call is always checked. Returns "" or what was wrong.
  std::string finish_last(CUstream stream);
  bundle::Executor& executor() { return *executor_; }
  int64_t calls() const { return calls_; }
  int64_t checked_calls() const { return checked_; }
  // The candidate's precision as the GPU will execute it: the lowest of the kernels its plan launches
  // and its library steps, read from the compiled code (never from a record's claim).
  const std::string& precision() const { return precision_; }
  // What any call left where no call may write (guard zones, params, init's scratch), or "".
  std::string state_violation();

  struct CallFailed : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  // The candidate path refused the bundle on this GPU ("policy_violation: ...", "compile_error: ...",
  // "plan_error: ..."): nothing was timed.
  struct Refused : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

 private:
  std::string finish_call(int64_t call, bool check);
  CallInputs& inputs_;
  uint32_t guard_seed_;
  double check_fraction_;
  std::mt19937_64 pick_;                        // which calls are checked: never seen by the kernel
  std::map<std::string, std::string> read_only_;  // params and init's scratch: ref -> hash after init
  std::map<std::string, std::string> input_hashes_;  // the current call's inputs, hashed before it ran
  std::unique_ptr<bundle::Executor> executor_;
  CUgraphExec graph_ = nullptr;
  int64_t calls_ = 0, checked_ = 0;
  bool pending_ = false, pending_check_ = false;
  std::string precision_;
};

struct CandidateTiming {
  measure::LoopResult loop;
  int64_t checked_calls = 0;
  bool outputs_ok = true;
  std::string failure;  // what was wrong when timed
  bool refused = false;  // the failure is the candidate path's refusal on this GPU: nothing was timed
  Json outputs_check = Json::array();  // per checked call: {call, seed, ok, max_abs_err, ...}
  double draw_ms_per_call = 0;         // the untimed fresh draw + copy + fingerprint, per call
  std::string precision;               // read from the compiled candidate (empty: its setup failed)
  Json params;                         // the worker's device params (kept for --metrics' replay)
  std::vector<InputSet> sets;          // the set drawn with the params (kept for --metrics' replay)
  std::vector<std::string> keys;       // what the worker keeps for this timing, released by the caller
  // A remeasure round's timed and checked calls added to these (its outputs_check entries tagged with
  // `round`), so checked_calls and outputs_check keep describing the same calls.
  void append_round(const CandidateTiming& more, int round);
};

// Asks the worker for the input sets (seeds options.seed + k) and their reference outputs, kept on
// the GPU under fresh keys (appended to `keys`); the params too when `params` is given.
std::vector<InputSet> make_input_sets(GpuSession& gpu, const std::string& task_id, int count, uint64_t seed, Json* params,
                                      std::vector<std::string>& keys);

// This GPU could not hold a candidate's timing: out of device memory in the tool's setup or timed
// calls, or the reference worker out of memory for a draw even when retried alone (its answer's
// memory_admission "alone", the signal kernel-check's redraw reads too), or a checked call's
// reference that fit only with the candidate ended and then matched (a wrong call is failed, -1). What a
// candidate may use is declared (buffers, scratch within the cap, library workspaces) and its stack
// is bounded by the rules, so it is the node's limit, not a verdict: Profiler::profile gives that
// record prof.status node_error (correct null: no reward, no -1) and goes on with the next record;
// --resume times it again. Any other worker or driver failure stays an EnvironmentError (exit 3).
struct NodeMemoryError : EnvironmentError {
  using EnvironmentError::EnvironmentError;
};

// `loaded` is the worker's load answer for the task (tensor specs). `round` numbers the timings of
// one record (remeasure rounds): no two rounds, and no call within one, share an input seed.
// Never throws for a candidate that goes wrong when timed: outputs_ok false and `failure` say what
// happened. Throws NodeMemoryError when the GPU cannot hold the timing.
CandidateTiming time_candidate(GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
                               const ProfOptions& options, int round = 0);

// Releases what the worker keeps for a timing (never throws).
void release_sets(GpuSession& gpu, const CandidateTiming& timing);

}  // namespace ca::kernel_prof
