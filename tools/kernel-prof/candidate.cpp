// One candidate on the GPU: bench setup, fresh inputs per call, timing, checked calls.
#include "tools/kernel-prof/candidate.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "libcommon/bundle/compare.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/cuda/ipc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/safetensors.hpp"
#include "libcommon/worker/requests.hpp"

namespace ca::kernel_prof {

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

CandidateBench::CandidateBench(bundle::BundleSources sources, const Json& loaded, const std::string& arch, const Json& params,
                               CallInputs& inputs, uint32_t guard_seed, double check_fraction, uint64_t pick_seed,
                               const bundle::Rules* rules)
    : inputs_(inputs), guard_seed_(guard_seed), check_fraction_(check_fraction), pick_(pick_seed) {
  bundle::CandidateOptions copt;
  copt.arch = arch;
  // The rules again, on what this GPU compiles and loads: kernel-check's verdict may come from another
  // arch (--arch, --compile-only on a CPU node, another GPU), where `#if __CUDA_ARCH__` hid a clock,
  // the heap or a forbidden call from the code it checked. Milliseconds, against trusting a record.
  copt.rules = rules;
  bundle::Candidate c = bundle::prepare_candidate(std::move(sources), nullptr, copt);
  if (c.refused) throw Refused(c.refused->status + ": " + c.refused->reason);
  const bundle::Binding binding =
      bundle::bind_candidate(c, bundle::IoSpec::from_json(loaded), bundle::LaunchLimits::for_arch(arch), copt.rules);
  if (binding.refused) throw Refused(binding.refused->status + ": " + binding.refused->reason);
  precision_ = c.precision(&*binding.bound);
  auto& drv = cuda::Driver::get();
  executor_ = std::make_unique<bundle::Executor>(*binding.bound, c.compiled->cubin);
  auto& ex = *executor_;
  if (!params.is_null()) ex.upload_shared(params);
  ex.run_init();
  ex.fill_guards(guard_seed_);
  ex.synchronize();
  // Params and init's scratch: no call may change them (checked after timing).
  read_only_ = ex.init_scratch_hashes();
  for (const auto& b : ex.plan().buffers)
    if (b.space == bundle::Space::param && b.bytes > 0) read_only_[b.ref] = ex.hash(b.ref);
  graph_ = ex.capture_forward();
  drv.check(drv.cuCtxSynchronize(), "candidate setup");
}

CandidateBench::~CandidateBench() {
  if (graph_) cuda::Driver::get().cuGraphExecDestroy(graph_);
}

std::string CandidateBench::state_violation() {
  auto& ex = *executor_;
  auto guards = ex.check_guards(guard_seed_);
  if (!guards.empty()) return guards.front().text();
  for (const auto& ref : ex.changed_init_scratch(read_only_))
    return "a call changed " + ref +
           (ref.rfind("scratch.", 0) == 0 ? ", which init wrote (init's scratch is read-only in forward)" : " (params are read-only)");
  return "";
}

std::string CandidateBench::finish_call(int64_t call, bool check) {
  auto& ex = *executor_;
  if (check) {
    ++checked_;
    // The inputs as the call found them: a call that wrote into its inputs is wrong.
    for (const auto& ref : ex.changed_init_scratch(input_hashes_))
      return log::cat("call ", call, " changed ", ref, " (inputs are read-only)");
    auto guards = ex.check_guards(guard_seed_);
    if (!guards.empty()) return log::cat("call ", call, ": ", guards.front().text());
  }
  return inputs_.finish(call, check, ex);
}

void CandidateBench::prepare(int /*set*/, CUstream stream) {
  auto& drv = cuda::Driver::get();
  auto& ex = *executor_;
  // The previous call is over before its inputs are replaced (and its outputs read, when checked).
  drv.check(drv.cuStreamSynchronize(stream), "previous call");
  if (pending_) {
    pending_ = false;
    std::string why = finish_call(calls_ - 1, pending_check_);
    if (!why.empty()) throw CallFailed(why);
  }
  // A fresh set: drawn by the worker, copied in (mapped, copied and unmapped before any candidate
  // code runs), fingerprinted. Every call does this same work, checked or not.
  ex.upload_shared(inputs_.draw(calls_));
  input_hashes_.clear();
  for (const auto& b : ex.plan().buffers)
    if (b.space == bundle::Space::input && b.bytes > 0) input_hashes_[b.ref] = ex.hash(b.ref);
  pending_check_ = std::uniform_real_distribution<double>(0, 1)(pick_) < check_fraction_;
  pending_ = true;
  ++calls_;
  ex.reset_call_state(stream);
  // Every output byte drawn afresh: a call that skips its work leaves bytes behind that no kernel
  // could know before the call, which the check sees.
  ex.poison_outputs(stream);
}

void CandidateBench::enqueue(int /*set*/, CUstream stream) {
  auto& drv = cuda::Driver::get();
  drv.check(drv.cuGraphLaunch(graph_, stream), "cuGraphLaunch");
}

std::string CandidateBench::finish_last(CUstream stream) {
  auto& drv = cuda::Driver::get();
  drv.check(drv.cuStreamSynchronize(stream), "last call");
  if (!pending_) return "";
  pending_ = false;
  return finish_call(calls_ - 1, true);
}

namespace {
// A worker request of a timing that failed: NodeMemoryError when the worker ran out of GPU memory
// even alone (WorkerClient::request's retry), else EnvironmentError.
[[noreturn]] void throw_worker_failure(const std::string& what, const std::string& task_id, const Json& a) {
  const std::string text = "reference worker: " + what + " for task " + task_id + ": " + a.value("error", std::string("?")) + ": " +
                           a.value("detail", std::string());
  if (worker::out_of_memory_alone(a)) throw NodeMemoryError(text + " (out of GPU memory, even alone)");
  throw EnvironmentError(text);
}
}  // namespace

std::vector<InputSet> make_input_sets(GpuSession& gpu, const std::string& task_id, int count, uint64_t seed, Json* params,
                                      std::vector<std::string>& keys) {
  worker::WorkerClient& w = gpu.worker();
  static std::atomic<int64_t> timings{0};
  const std::string stem = "kp-" + std::to_string(++timings) + "-";
  std::vector<InputSet> sets;
  for (int k = 0; k < count; ++k) {
    InputSet set;
    set.seed = seed + uint64_t(k);
    const std::string in_key = stem + "in-" + std::to_string(k), ref_key = stem + "ref-" + std::to_string(k);
    keys.push_back(in_key);
    keys.push_back(ref_key);
    std::optional<std::string> params_key;
    if (k == 0 && params) {
      params_key = stem + "params";
      keys.push_back(*params_key);
    }
    worker::Trial d = worker::draw_trial(w, task_id, set.seed, {in_key, ref_key, params_key});
    if (!d.ok()) {
      w.request(worker::request::release(keys));
      throw_worker_failure(d.failed, task_id, d.answer);
    }
    set.inputs = std::move(d.inputs);
    set.reference = std::move(d.reference);
    if (params_key) *params = std::move(d.params);
    sets.push_back(std::move(set));
  }
  return sets;
}

void CandidateTiming::append_round(const CandidateTiming& more, int round) {
  measure::append_round(loop, more.loop);
  checked_calls += more.checked_calls;
  for (Json entry : more.outputs_check) {
    entry["round"] = round;
    outputs_check.push_back(std::move(entry));
  }
}

void release_sets(GpuSession& gpu, const CandidateTiming& timing) {
  if (timing.keys.empty()) return;
  try {
    gpu.worker().request(worker::request::release(timing.keys));
  } catch (const std::exception& e) {
    log::warn("reference worker: release: ", e.what());
  }
}

namespace {

// Fault injection for the tests (tests/kernel-prof/gpu.sh): CA_KERNEL_PROF_INJECT_FAULT names
// candidate ids (comma-separated) whose timing starts with a kernel that traps in the candidate's
// context, so the real sticky error and what follows it (the record failed, a fresh process for the
// records after it) run on demand. The environment is the operator's, never a candidate's.
// CA_KERNEL_PROF_INJECT_OOM does the same for a GPU too small for the candidate's timing: its
// setup ends as a real out-of-memory there would (NodeMemoryError).
bool named_in(const char* variable, const std::string& candidate_id) {
  const char* ids = std::getenv(variable);
  return ids && !candidate_id.empty() && (std::string(",") + ids + ",").find("," + candidate_id + ",") != std::string::npos;
}

void inject_fault_if_asked(const std::string& candidate_id, CUstream stream) {
  if (named_in("CA_KERNEL_PROF_INJECT_OOM", candidate_id))
    throw NodeMemoryError("GPU memory (setup): injected (CA_KERNEL_PROF_INJECT_OOM): this GPU is too small to time the task, "
                          "which is not the candidate's fault");
  if (!named_in("CA_KERNEL_PROF_INJECT_FAULT", candidate_id)) return;
  auto& drv = cuda::Driver::get();
  CUfunction trap = bundle::trusted_kernel("inject_fault.cu", "extern \"C\" __global__ void ca_inject_trap() { asm volatile(\"trap;\"); }",
                                           "ca_inject_trap");
  drv.check(drv.cuLaunchKernel(trap, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr), "injected fault");
  drv.check(drv.cuStreamSynchronize(stream), "injected fault");
}

// Each call's inputs drawn fresh by the worker on the GPU; a checked call's reference computed from
// the very tensors the call read, then compared with its outputs where they are.
class FreshInputs : public CallInputs {
 public:
  // `check` is the record's kernel-check section: its tolerance mode (calibrated unless it says
  // published) and the calibration of its warm call (the bound of an output this call could not
  // calibrate). The precision the calls are held to is the candidate's own (judge_as), never the
  // record's claim.
  FreshInputs(GpuSession& gpu, std::string task_id, uint64_t seed_base, const Json& check, CandidateTiming& result)
      : gpu_(gpu), task_id_(std::move(task_id)), seed_base_(seed_base), check_(check), result_(result) {
    static std::atomic<int64_t> timings{0};
    stem_ = "kpf-" + std::to_string(++timings) + "-";
  }
  // Before the first call: the precision read from the compiled candidate.
  void judge_as(const std::string& precision) {
    if (mode() != "calibrated") return;
    const bundle::CalibrationRule rule = bundle::calibration_rule(precision);
    calibrate_ = worker::request::Calibrate{precision, rule.k, rule.floor, rule.floor_min};
  }
  ~FreshInputs() override {
    release();
    free_copies();
  }

  Json draw(int64_t call) override {
    release();
    const auto t0 = std::chrono::steady_clock::now();
    // 48-bit seeds (torch takes them whole); every call its own.
    seed_ = ca::splitmix64(seed_base_ + uint64_t(call)) >> 16;
    key_ = stem_ + "in-" + std::to_string(call);
    Json req = worker::request::inputs(task_id_, seed_, key_);
    req["stats"] = false;  // drawn where the task is built (the GPU), no statistics: nobody reads them
    Json a = gpu_.worker().request(req);
    if (!a.value("ok", false)) {
      key_.clear();
      throw_worker_failure("inputs", task_id_, a);
    }
    draw_ms_ += ms_since(t0);
    ++draws_;
    return std::move(a["tensors"]);
  }

  std::string finish(int64_t call, bool check, bundle::Executor& ex) override {
    if (!check) {
      release();
      return "";
    }
    // The outputs first, copied into the trusted context after the call's kernels completed: a
    // reference the worker cannot make beside the candidate is then made without it (judge_alone).
    call_ = call;
    copy_outputs(ex);
    Json b = reference_answer();
    if (!b.value("ok", false)) {
      if (worker::out_of_memory_alone(b)) {
        // The inputs stay with the worker (key_), the outputs' copies here.
        throw ReferenceBesideCandidate("reference worker: reference for task " + task_id_ + ": out of GPU memory beside the candidate");
      }
      release();
      throw_worker_failure("reference", task_id_, b);
    }
    return compare_call(b);
  }

  // The worker could not make a checked call's reference beside the candidate (out of GPU memory
  // even alone, as kernel-check's redraw reads it): what holds memory is the candidate's, within its
  // declared buffers and cap, so time_into ends the candidate (every byte it held freed) and calls
  // judge_alone. Never a way out of a -1: the call's outputs were copied before the reference was
  // asked for, and they are compared with the reference made without the candidate.
  struct ReferenceBesideCandidate : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  // After ReferenceBesideCandidate, with the candidate ended: that call's reference from the same
  // inputs, compared with its copied outputs. "" when they match; NodeMemoryError when the worker
  // runs out of GPU memory even now (the node's limit).
  std::string judge_alone() {
    Json b = reference_answer();
    if (!b.value("ok", false)) {
      release();
      throw_worker_failure("reference (the candidate ended)", task_id_, b);
    }
    return compare_call(b);
  }
  // CA_KERNEL_PROF_INJECT_REF_OOM (tests): the first checked call's reference answers as a worker
  // out of GPU memory even alone would.
  void inject_reference_oom() { inject_ref_oom_ = true; }
  // The trusted copies of the outputs, allocated at setup, before any call: a copy that does not fit
  // is the node's limit found before anything was checked, never an out-of-memory in the middle of a
  // checked call (which would leave its outputs unjudged).
  void reserve_copies(bundle::Executor& ex) {
    cuda::ContextSwitch in_trusted(gpu_.trusted_context());
    for (const auto& buf : ex.plan().buffers)
      if (buf.space == bundle::Space::output && buf.bytes > 0 && !copies_[buf.ref])
        copies_[buf.ref] = alloc_trusted(size_t(buf.bytes), "trusted copy of " + buf.ref);
  }

  double draw_ms_per_call() const { return draws_ ? draw_ms_ / double(draws_) : 0; }

 private:
  // The candidate's outputs copied into the trusted context (cuMemcpyPeerAsync crosses contexts),
  // the reference mapped there, compared there.
  // The bound of this call: calibrated on its own inputs like kernel-check's trials (an output it
  // could not calibrate bounded by the check's warm call), or the check's mode.
  // The check's tolerance mode; a record that names none is held to the calibrated bound, the
  // default of kernel-check, never to a looser one.
  std::string mode() const {
    return check_.contains("tolerance") && check_["tolerance"].is_string() ? check_["tolerance"].get<std::string>() : "calibrated";
  }
  bundle::Tolerances tolerances_for(Json& answer) const {
    if (!calibrate_) return bundle::Tolerances::by_mode(mode());
    Json cal = answer.contains("calibration") && answer["calibration"].is_object() ? answer["calibration"] : Json::object();
    std::string err = answer.value("calibration_error", std::string());
    if (check_.contains("calibration") && !check_["calibration"].is_null()) {
      // The record's calibration bounds only the outputs this call could not calibrate, and a fault in
      // those entries is the record's: a bad record naming check.calibration, not the end of the run.
      if (!check_["calibration"].is_object()) throw FieldError("check.calibration", "expected an object");
      Json used = Json::object();
      for (const auto& [name, entry] : check_["calibration"].items())
        if (!cal.contains(name)) used[name] = entry;
      try {
        bundle::Tolerances::calibrated(calibrate_->precision, used, "");
      } catch (const InputError& e) {
        throw FieldError("check.calibration", e.what());
      }
      bundle::Tolerances::fill_calibration(cal, err, used);
    }
    return bundle::Tolerances::calibrated(calibrate_->precision, cal, err);
  }

  Json reference_answer() {
    if (inject_ref_oom_) {
      inject_ref_oom_ = false;
      return Json{{"ok", false}, {"error", "out_of_memory"}, {"detail", "CUDA out of memory (injected: CA_KERNEL_PROF_INJECT_REF_OOM)"},
                  {"memory_admission", "alone"}};
    }
    return gpu_.worker().request(worker::request::reference(task_id_, key_, ref_key(), std::nullopt, calibrate_));
  }
  std::string ref_key() const { return stem_ + "ref-" + std::to_string(call_); }

  // The candidate's outputs copied into the trusted context (cuMemcpyPeerAsync crosses contexts).
  void copy_outputs(bundle::Executor& ex) {
    auto& drv = cuda::Driver::get();
    const CUcontext trusted = gpu_.trusted_context(), cand = gpu_.context();
    cuda::ContextSwitch in_trusted(trusted);
    CUstream ts = gpu_.trusted_stream();
    got_.clear();
    for (const auto& buf : ex.plan().buffers) {
      if (buf.space != bundle::Space::output) continue;
      CUdeviceptr& copy = copies_[buf.ref];
      if (!copy && buf.bytes > 0) copy = alloc_trusted(size_t(buf.bytes), "trusted copy of " + buf.ref);
      if (buf.bytes > 0)
        drv.check(drv.cuMemcpyPeerAsync(copy, trusted, ex.device_pointer(buf.ref), cand, size_t(buf.bytes), ts),
                  "copy of " + buf.ref + " into the trusted context");
      got_[buf.ref] = {buf.dtype, buf.shape, copy};
    }
    drv.check(drv.cuStreamSynchronize(ts), "copies into the trusted context");
  }

  // The compare runs in the trusted context, on the copies of the outputs made after the
  // candidate's kernels of this call completed, against a reference mapped now: nothing it reads
  // holds a value from while a candidate kernel ran (contexts share an address space; order is the
  // guard). Records the call in outputs_check; "" or what was wrong.
  std::string compare_call(Json& b) {
    cuda::ContextSwitch in_trusted(gpu_.trusted_context());
    ca::bundle::DeviceOutputs want;
    cuda::IpcMaps maps;
    for (const auto& [name, t] : cuda::shared_tensors(b["tensors"], "reference")) want[name] = {t.dtype, t.shape, maps.map(t)};
    ca::bundle::CompareResult cmp = ca::bundle::compare_outputs_device(got_, want, tolerances_for(b), gpu_.trusted_stream());
    maps.close();
    gpu_.worker().request(worker::request::release({ref_key()}));
    Json entry = cmp.to_json();
    entry["call"] = call_;
    entry["seed"] = seed_;
    entry["ok"] = cmp.ok;
    result_.outputs_check.push_back(entry);
    release();
    if (!cmp.ok) return log::cat("call ", call_, " (seed ", seed_, "): ", cmp.reason);
    return "";
  }
  // The tool's own memory: when the device is full, the worker's cached blocks go back to the driver
  // first (torch keeps what its last forward used); still no room is the node's limit (the CudaError
  // reaches time_into, whose throw_if_out_of_memory makes it a NodeMemoryError, never a verdict).
  CUdeviceptr alloc_trusted(size_t bytes, const std::string& what) {
    auto& drv = cuda::Driver::get();
    CUdeviceptr p = 0;
    CUresult r = drv.cuMemAlloc(&p, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      gpu_.worker().request(worker::request::release({}, /*empty_cache=*/true));
      r = drv.cuMemAlloc(&p, bytes);
    }
    drv.check(r, log::cat("cuMemAlloc(", what, ", ", bytes >> 20, " MiB)"));
    return p;
  }
  void free_copies() {
    if (copies_.empty()) return;
    auto& drv = cuda::Driver::get();
    CUcontext cur = nullptr;
    drv.cuCtxGetCurrent(&cur);
    drv.cuCtxSetCurrent(gpu_.trusted_context());
    for (auto& [ref, p] : copies_)
      if (p) drv.cuMemFree(p);
    drv.cuCtxSetCurrent(cur);
    copies_.clear();
  }
  std::map<std::string, CUdeviceptr> copies_;  // in the trusted context
  void release() {
    if (key_.empty()) return;
    try {
      gpu_.worker().request(worker::request::release({key_}));
    } catch (const std::exception& e) {
      log::warn("reference worker: release: ", e.what());
    }
    key_.clear();
  }
  GpuSession& gpu_;
  std::string task_id_, stem_, key_;
  uint64_t seed_base_, seed_ = 0;
  const Json& check_;
  std::optional<worker::request::Calibrate> calibrate_;
  CandidateTiming& result_;
  double draw_ms_ = 0;
  int64_t draws_ = 0;
  int64_t call_ = 0;                  // the checked call being finished
  ca::bundle::DeviceOutputs got_;     // its outputs, copied into the trusted context
  bool inject_ref_oom_ = false;
};

// The checked share of timed calls: each call with this chance, drawn after its inputs, plus the
// last call always.
constexpr double kCheckFraction = 0.25;

// Out of device memory while timing a candidate kernel-check passed: what it may use is declared
// (buffers, scratch within the cap, library workspaces) and its stack is bounded by the rules, so
// the GPU being full is the node's limit: a NodeMemoryError (prof.status node_error: no verdict, the
// record timed again by --resume, on a larger GPU), never "wrong when timed" (seen on an H100: level
// 1's 7.5 GB RMSNorm).
void throw_if_out_of_memory(const cuda::CudaError& e, const char* where) {
  if (e.result == CUDA_ERROR_OUT_OF_MEMORY)
    throw NodeMemoryError(std::string("GPU memory (") + where + "): " + e.what() +
                          ": this GPU is too small to time the task, which is not the candidate's fault");
}

// A checked call whose reference the worker could not make beside the candidate: the candidate is
// ended (its executor destroyed: every buffer, module and graph freed), then the call's reference is
// made from the same inputs and compared with the outputs copied before. Wrong: what was wrong (a
// -1, as any wrong call). Right: NodeMemoryError, as the candidate cannot be timed on this GPU
// beside its references (prof.status node_error, no verdict). So no memory a candidate holds turns a
// wrong call into no verdict (kernel-check's redraw with the runner ended, here).
std::string judge_without_candidate(std::unique_ptr<CandidateBench>& bench, FreshInputs& fresh, const std::string& what) {
  log::verbose(what, ": ending the candidate to make the reference without it");
  bench.reset();
  cuda::Driver::get().check(cuda::Driver::get().cuCtxSynchronize(), "the candidate ended");
  const std::string why = fresh.judge_alone();
  if (!why.empty()) return why;
  throw NodeMemoryError(what + "; made without it, the reference matched the call's outputs, but the candidate cannot be timed "
                        "beside its references on this GPU");
}

// Nothing a call may not touch was touched, looked for once the timed calls are over: a cache kept
// in the guard zones, params or init's scratch (they survive the reset between calls), or words
// written into the flush's buffer (the flush put them back before each call, so nothing of them
// reached a timed call; a kernel that writes into the judge's memory is still named for it).
std::string after_timing_violation(CandidateBench& bench, measure::L2Flusher& flusher, uint64_t repaired_before) {
  std::string why = bench.state_violation();
  if (!why.empty()) return why;
  if (uint64_t n = flusher.repaired_words() - repaired_before)
    return log::cat("the candidate wrote into the judge's L2 flush buffer (", n,
                    " 16-byte words, put back by the flush before each timed call)");
  return "";
}

// The seeds of a timing: its inputs' (the run's seed, the candidate, the round and a count of timings
// in this process, so a service timing the same candidate twice never repeats a set; without --seed
// the run's seed is itself unpredictable; a domain word keeps them apart from kernel-check's) and
// the checked calls' pick (drawn from the OS unless --seed, never seen by the kernel).
struct TimingSeeds {
  uint64_t inputs = 0, pick = 0;
};
TimingSeeds timing_seeds(const std::string& cand, const ProfOptions& options, int round) {
  static std::atomic<uint64_t> timings{0};
  uint64_t salt = 0;
  for (char c : sha256_hex(cand + "/kernel-prof/inputs")) salt = salt * 31 + uint64_t(uint8_t(c));
  TimingSeeds s;
  s.inputs = ca::splitmix64(options.seed ^ salt ^ (uint64_t(round) << 48) ^ ca::splitmix64(++timings));
  std::random_device rd;
  s.pick = options.seed_given ? ca::splitmix64(s.inputs ^ 0x636865636bULL) : (uint64_t(rd()) << 32 | rd());
  return s;
}

void time_into(CandidateTiming& result, GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
               const ProfOptions& options, int round) {
  const std::string task_id = task["task_id"].get<std::string>();
  bundle::BundleSources sources = bundle::read_bundle(record);  // FieldError: a bad record
  // Params (and one set, kept for --metrics' replay) as kernel-check draws them: the same weights.
  result.sets = make_input_sets(gpu, task_id, 1, options.seed, &result.params, result.keys);
  auto fail = [&](const std::string& why) {
    result.outputs_ok = false;
    result.failure = why;
  };
  const std::string cand = record.value("candidate_id", std::string());
  const TimingSeeds seeds = timing_seeds(cand, options, round);
  const uint64_t seed_base = seeds.inputs, pick_seed = seeds.pick;
  FreshInputs fresh(gpu, task_id, seed_base, record["check"], result);
  if (named_in("CA_KERNEL_PROF_INJECT_REF_OOM", cand)) fresh.inject_reference_oom();
  std::unique_ptr<CandidateBench> bench;
  const uint64_t flush_repaired = gpu.flusher().repaired_words();  // before any of the candidate's code
  try {
    inject_fault_if_asked(cand, gpu.stream());
    bench = std::make_unique<CandidateBench>(std::move(sources), loaded, gpu.identity().arch, result.params, fresh,
                                             uint32_t(options.seed * 0x9e3779b9ULL >> 7), kCheckFraction, pick_seed,
                                             &options.rules);
    fresh.reserve_copies(bench->executor());
  } catch (const FieldError&) {
    throw;
  } catch (const EnvironmentError&) {
    throw;  // the worker, the node: never the candidate's verdict
  } catch (const CandidateBench::Refused& e) {
    result.refused = true;
    return fail(e.what());
  } catch (const cuda::CudaError& e) {
    if (e.sticky()) {
      gpu.mark_dead(e.what());
      return fail(std::string("setup: the candidate's kernels killed the GPU context: ") + e.what());
    }
    throw_if_out_of_memory(e, "setup");
    return fail(std::string("setup: ") + e.what());
  } catch (const std::exception& e) {
    return fail(std::string("setup: ") + e.what());
  }
  result.precision = bench->precision();
  fresh.judge_as(result.precision);
  measure::LoopOptions lo;
  lo.stop = options.stop;
  lo.warmup_calls = options.warmup;
  lo.use_cupti = !options.no_cupti;
  lo.batch = 1;  // every call waits for its fresh inputs
  lo.host_bound = true;  // and its times are held to what the host's clock saw (timing_loop.hpp)
  auto finish = [&] {
    result.checked_calls = bench->checked_calls();
    result.draw_ms_per_call = fresh.draw_ms_per_call();
  };
  try {
    result.loop = measure::time_target(*bench, gpu.stream(), gpu.flusher(), lo);
    std::string why = bench->finish_last(gpu.stream());
    finish();
    if (!why.empty()) return fail(log::cat("after ", bench->calls(), " calls: ", why));
  } catch (const CandidateBench::CallFailed& e) {
    finish();
    return fail(e.what());
  } catch (const FreshInputs::ReferenceBesideCandidate& e) {
    finish();
    return fail(judge_without_candidate(bench, fresh, e.what()));
  } catch (const cuda::CudaError& e) {
    if (e.sticky()) {  // the candidate's own fault (kernel-check ran it; this layout, these inputs differ)
      finish();
      gpu.mark_dead(e.what());
      return fail(std::string("timed calls: the candidate's kernels killed the GPU context: ") + e.what());
    }
    throw_if_out_of_memory(e, "timed calls");
    return fail(std::string("timed calls: ") + e.what());
  }
  std::string why = after_timing_violation(*bench, gpu.flusher(), flush_repaired);
  if (!why.empty()) return fail(log::cat("after ", result.loop.calls, " timed calls: ", why));
}

}  // namespace

CandidateTiming time_candidate(GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
                               const ProfOptions& options, int round) {
  CandidateTiming result;
  try {
    time_into(result, gpu, record, task, loaded, options, round);
  } catch (...) {
    release_sets(gpu, result);  // what the worker kept for a timing that throws
    throw;
  }
  return result;
}

}  // namespace ca::kernel_prof
