// One candidate on the GPU: bench setup, timing, outputs checked after the timed calls.
#include "tools/kernel-prof/candidate.hpp"

#include <atomic>
#include <cstdio>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/plan.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/cuda/ipc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/safetensors.hpp"
#include "libcommon/bundle/compare.hpp"
#include "libcommon/worker/requests.hpp"

namespace ca::prof {

CandidateBench::CandidateBench(const Json& bundle, const Json& loaded, const std::string& arch, const Json& params,
                               const std::vector<InputSet>& sets, uint32_t guard_seed)
    : guard_seed_(guard_seed) {
  if (!bundle.contains("kernels") || !bundle["kernels"].is_object()) throw FieldError("bundle.kernels", "missing or not an object");
  if (!bundle.contains("plan")) throw FieldError("bundle.plan", "missing");
  std::map<std::string, std::string> kernels;
  for (auto& [name, src] : bundle["kernels"].items()) {
    if (!src.is_string()) throw FieldError("bundle.kernels." + name, "expected CUDA source text");
    kernels[name] = src.get<std::string>();
  }
  bundle::Plan plan = bundle::Plan::parse(bundle["plan"]);
  bundle::CompileOptions copt;
  copt.arch = arch;
  bundle::CompileResult cr = bundle::compile_bundle(kernels, plan.kernel_names(), copt);
  if (!cr.ok) throw std::runtime_error("compile: " + cr.first_error);
  bundle::BoundPlan bound = bundle::bind_plan(plan, bundle::signatures_of(cr), bundle::IoSpec::from_json(loaded),
                                              bundle::LaunchLimits::for_arch(arch));
  auto& drv = cuda::Driver::get();
  for (const auto& s : sets) {
    auto ex = std::make_unique<bundle::Executor>(bound, cr.cubin);
    if (!params.is_null()) ex->upload_shared(params);
    ex->run_init();
    ex->upload_shared(s.inputs);
    ex->fill_guards(guard_seed_);
    ex->synchronize();
    // Inputs, params and init's scratch: no call may change them (checked after timing).
    std::map<std::string, std::string> hashes = ex->init_scratch_hashes();
    for (const auto& b : ex->plan().buffers)
      if ((b.space == bundle::Space::input || b.space == bundle::Space::param) && b.bytes > 0) hashes[b.ref] = ex->hash(b.ref);
    read_only_.push_back(std::move(hashes));
    graphs_.push_back(ex->capture_forward());
    std::vector<std::pair<CUdeviceptr, size_t>> outs;
    for (const auto& b : ex->plan().buffers)
      if (b.space == bundle::Space::output && b.bytes > 0) outs.emplace_back(ex->device_pointer(b.ref), size_t(b.bytes));
    outputs_.push_back(outs);
    executors_.push_back(std::move(ex));
  }
  drv.check(drv.cuCtxSynchronize(), "candidate setup");
}

CandidateBench::~CandidateBench() {
  auto& drv = cuda::Driver::get();
  for (auto g : graphs_) drv.cuGraphExecDestroy(g);
}

std::string CandidateBench::state_violation(int set) {
  auto& ex = *executors_[set];
  auto guards = ex.check_guards(guard_seed_);
  if (!guards.empty()) return guards.front().text();
  for (const auto& ref : ex.changed_init_scratch(read_only_[set]))
    return "a timed call changed " + ref +
           (ref.rfind("scratch.", 0) == 0 ? ", which init wrote (init's scratch is read-only in forward)" : " (inputs and params are read-only)");
  return "";
}

void CandidateBench::prepare(int set, CUstream stream) {
  auto& drv = cuda::Driver::get();
  executors_[set]->reset_call_state(stream);
  // NaN in every output byte: a call that skips its work leaves NaN behind, which the check sees.
  for (auto& [ptr, bytes] : outputs_[set]) drv.check(drv.cuMemsetD8Async(ptr, 0xFF, bytes, stream), "poison outputs");
}

void CandidateBench::enqueue(int set, CUstream stream) {
  auto& drv = cuda::Driver::get();
  drv.check(drv.cuGraphLaunch(graphs_[set], stream), "cuGraphLaunch");
}

std::vector<InputSet> make_input_sets(GpuSession& gpu, const std::string& task_id, int count, uint64_t seed, Json* params,
                                      std::vector<std::string>& keys) {
  WorkerClient& w = gpu.worker();
  static std::atomic<int64_t> timings{0};
  const std::string stem = "kp-" + std::to_string(++timings) + "-";
  std::vector<InputSet> sets;
  auto failed = [&](const char* what, const Json& a) {
    return EnvironmentError(std::string("reference worker: ") + what + " for task " + task_id + ": " +
                            a.value("error", std::string("?")) + ": " + a.value("detail", std::string()));
  };
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
    Trial d = draw_trial(w, task_id, set.seed, {in_key, ref_key, params_key});
    if (!d.ok()) {
      w.request(worker_request::release(keys));
      throw failed(d.failed.c_str(), d.answer);
    }
    set.inputs = std::move(d.inputs);
    set.reference = std::move(d.reference);
    if (params_key) *params = std::move(d.params);
    sets.push_back(std::move(set));
  }
  return sets;
}

void release_sets(GpuSession& gpu, const CandidateTiming& timing) {
  if (timing.keys.empty()) return;
  try {
    gpu.worker().request(worker_request::release(timing.keys));
  } catch (const std::exception& e) {
    log::warn("reference worker: release: ", e.what());
  }
}

namespace {

void time_into(CandidateTiming& result, GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
               const ProfOptions& options) {
  const std::string task_id = task["task_id"].get<std::string>();
  result.sets = make_input_sets(gpu, task_id, options.input_sets, options.seed, &result.params, result.keys);
  result.input_sets = int(result.sets.size());
  const std::string tolerance = record["check"].value("tolerance", std::string("default"));
  auto fail = [&](const std::string& why) {
    result.outputs_ok = false;
    result.failure = why;
  };
  std::unique_ptr<CandidateBench> bench;
  try {
    bench = std::make_unique<CandidateBench>(record["bundle"], loaded, gpu.identity().arch, result.params, result.sets,
                                             uint32_t(options.seed * 0x9e3779b9ULL >> 7));
  } catch (const FieldError&) {
    throw;
  } catch (const cuda::CudaError& e) {
    if (e.sticky()) throw InternalError(std::string("the GPU context died while setting up the candidate: ") + e.what());
    return fail(std::string("setup: ") + e.what());
  } catch (const std::exception& e) {
    return fail(std::string("setup: ") + e.what());
  }
  measure::LoopOptions lo;
  lo.stop = options.stop;
  lo.warmup_calls = options.warmup;
  lo.use_cupti = !options.no_cupti;
  lo.ignore_kernels = {bundle::kScrubSharedKernel};  // prepare()'s, between calls
  try {
    result.loop = measure::time_target(*bench, gpu.stream(), gpu.flusher(), lo);
  } catch (const cuda::CudaError& e) {
    if (e.sticky()) throw InternalError(std::string("the GPU context died during the timed calls: ") + e.what());
    return fail(std::string("timed calls: ") + e.what());
  }
  // Nothing a timed call may not touch was touched (a cache kept in the guard zones, inputs or
  // init's scratch survives the reset between calls, so it is looked for here).
  for (int k = 0; k < result.input_sets && result.outputs_ok; ++k) {
    std::string why = bench->state_violation(k);
    if (!why.empty()) return fail(log::cat("input set ", k, " after ", result.loop.calls, " timed calls: ", why));
  }
  // The last timed call on every set left its outputs in place: compare them with the reference, on
  // the GPU (the reference mapped only now, after every candidate call).
  for (int k = 0; k < result.input_sets; ++k) {
    ca::bundle::DeviceOutputs got, want;
    for (const auto& b : bench->executor(k).plan().buffers)
      if (b.space == bundle::Space::output) got[b.ref] = {b.dtype, b.shape, bench->executor(k).device_pointer(b.ref)};
    cuda::IpcMaps maps;
    for (const auto& [name, t] : cuda::shared_tensors(result.sets[k].reference, "reference"))
      want[name] = {t.dtype, t.shape, maps.map(t)};
    ca::bundle::CompareResult cmp = ca::bundle::compare_outputs_device(got, want, tolerance, -1, -1, gpu.stream());
    maps.close();
    Json entry = cmp.to_json();
    entry["set"] = k;
    entry["seed"] = result.sets[k].seed;
    entry["ok"] = cmp.ok;
    result.outputs_check.push_back(entry);
    if (!cmp.ok && result.outputs_ok) {
      result.outputs_ok = false;
      result.failure = log::cat("input set ", k, " (seed ", result.sets[k].seed, ") after ", result.loop.calls,
                                " timed calls: ", cmp.reason);
    }
  }
}

}  // namespace

CandidateTiming time_candidate(GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
                               const ProfOptions& options) {
  CandidateTiming result;
  try {
    time_into(result, gpu, record, task, loaded, options);
  } catch (...) {
    release_sets(gpu, result);  // what the worker kept for a timing that throws
    throw;
  }
  return result;
}

}  // namespace ca::prof
