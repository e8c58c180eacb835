// The GPU stage of a check (gpu_stage.hpp).
#include "tools/kernel-check/gpu_stage.hpp"

#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <map>

#include "libcommon/cuda/driver.hpp"
#include "libcommon/cuda/ipc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/measure/gpu_lock.hpp"
#include "libcommon/measure/gpu_state.hpp"
#include "libcommon/measure/stage_clock.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/worker/worker_client.hpp"
#include "libcommon/bundle/compare.hpp"
#include "libcommon/worker/requests.hpp"
#include "tools/kernel-check/runner.hpp"
#include "tools/kernel-check/verdicts.hpp"

namespace ca::kernel_check {

struct GpuStage::Lane {
  int gpu = 0;
  std::string uuid;  // for the node's per-GPU lock
  ca::bundle::LaunchLimits limits;  // this GPU's arch's
  CUcontext ctx = nullptr;  // this process's primary context on the GPU (for the comparisons)
  std::unique_ptr<ca::worker::WorkerClient> worker;
  std::unique_ptr<RunnerClient> runner;
  // task key (worker::request::task_key) -> the worker's load answer, and the worker process that
  // gave it (WorkerClient::spawns)
  std::map<std::string, std::pair<ca::Json, int>> loaded;
  int64_t files = 0;
};

namespace {

// The trials' draws: the warm call from the task's own distribution, then in turn the task's
// distribution, shifted and scaled values, outliers and a later seed stream (analytic and sampling
// shortcuts fail): each variant at least once in the 5 trials after the warm call, again with more.
const char* variant_for_trial(size_t t) {
  static const char* const cycle[] = {"plain", "shift_scale", "outliers", "seed_stream"};
  return t == 0 ? "plain" : cycle[(t - 1) % 4];
}

// One trial's draw: its inputs (a variant of the task's distribution or not) and the reference on
// them with its calibration, kept on the worker's GPU.
struct Draw {
  ca::Json inputs, reference, params;
  ca::Json variant;                    // the worker's record of the variant applied (null: plain)
  ca::Json calibration;                // per output (null: not asked)
  std::string calibration_error;
  double forward_ms = 0;
  std::string failed;                  // "" when drawn; else the request that failed
  ca::Json answer;                     // the failing request's answer
};

Draw draw(ca::worker::WorkerClient& worker, const std::string& task_id, uint64_t seed, const std::string& variant, bool with_params,
          const std::optional<ca::worker::request::Calibrate>& calibrate) {
  Draw d;
  ca::Json a = worker.request(ca::worker::request::inputs(task_id, seed, "kc-in", variant));
  if (!a.value("ok", false)) {
    d.failed = "inputs";
    d.answer = std::move(a);
    return d;
  }
  d.inputs = std::move(a["tensors"]);
  if (a.contains("variant")) d.variant = std::move(a["variant"]);
  ca::Json b = worker.request(ca::worker::request::reference(
      task_id, "kc-in", "kc-ref", with_params ? std::optional<std::string>("kc-params") : std::nullopt, calibrate));
  if (!b.value("ok", false)) {
    d.failed = "reference";
    d.answer = std::move(b);
    return d;
  }
  d.reference = std::move(b["tensors"]);
  if (with_params) d.params = std::move(b["params"]);
  if (b.contains("forward_ms") && b["forward_ms"].is_number()) d.forward_ms = b["forward_ms"].get<double>();
  if (b.contains("calibration")) d.calibration = std::move(b["calibration"]);
  if (b.contains("calibration_error") && b["calibration_error"].is_string()) d.calibration_error = b["calibration_error"].get<std::string>();
  return d;
}

double task_eager_ms(const ca::Json& task) {
  for (const char* key : {"eager_ms", "eager_time_ms"})
    if (task.contains(key) && task[key].is_number()) return task[key].get<double>();
  if (task.contains("filters") && task["filters"].is_object()) {
    const auto& f = task["filters"];
    if (f.contains("eager_time_ms") && f["eager_time_ms"].is_number()) return f["eager_time_ms"].get<double>();
  }
  return 0;
}

}  // namespace

GpuStage::GpuStage(const CheckOptions& options, const ca::bundle::Rules& rules, std::vector<int> gpus, uint64_t base_seed)
    : options_(options), rules_(rules), base_seed_(base_seed) {
  // The lanes' reference workers start side by side: each start is seconds of importing torch, and
  // `serve -j 8` would otherwise wait for eight in a row. The driver's queries follow, lane by lane.
  std::vector<std::future<std::unique_ptr<Lane>>> starting;
  // Each lane's worker gets its share of --worker-memory (all of them together), never 16 GiB each
  // times the lanes.
  const std::size_t memory_mb = ca::worker::worker_memory_share_mb(options_.worker_memory_mb, static_cast<int>(gpus.size()));
  for (int g : gpus)
    starting.push_back(std::async(std::launch::async, [g, memory_mb, one_task = options_.one_task_per_worker] {
      auto lane = std::make_unique<Lane>();
      lane->gpu = g;
      ca::worker::WorkerOptions wo;
      wo.device = "cuda:" + std::to_string(g);
      wo.memory_limit_mb = memory_mb;
      wo.one_task_per_process = one_task;  // --accept-tasks: clients' tasks share no interpreter
      lane->worker = std::make_unique<ca::worker::WorkerClient>(wo);  // EnvironmentError without torch/GPU
      return lane;
    }));
  std::exception_ptr failed;
  for (auto& f : starting) {
    try {
      auto lane = f.get();
      lane->runner = std::make_unique<RunnerClient>(lane->gpu);
      lane->ctx = ca::cuda::Driver::get().primary_context(lane->gpu);
      lane->uuid = ca::measure::identify_gpu(lane->gpu).uuid;
      lane->limits = ca::bundle::LaunchLimits::for_arch(ca::cuda::Driver::get().device_info(lane->gpu).arch());
      free_.push_back(lane.get());
      lanes_.push_back(std::move(lane));
    } catch (...) {
      if (!failed) failed = std::current_exception();  // the first failure, after every start has ended
    }
  }
  if (failed) std::rethrow_exception(failed);
}

GpuStage::~GpuStage() {
  for (auto& l : lanes_) l->runner->kill();
}

size_t GpuStage::lanes() const { return lanes_.size(); }

void GpuStage::judge(Prepared& p, const ca::Json& task, const std::string& task_id, const std::string& where) {
  Lane* lane;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !free_.empty(); });
    lane = free_.back();
    free_.pop_back();
  }
  try {
    // The node's per-GPU lock, shared, for this lane's GPU only and only once the lane is ours:
    // verifies run beside each other, never while kernel-prof times there. (Taken before waiting
    // for a lane, every thread queued behind a busy lane would hold it, and a profile waiting at
    // the gate would wait for all of them.)
    ca::measure::GpuLock gpu_lock(lane->uuid, options_.lock_timeout_s, ca::measure::GpuLock::Mode::shared);
    judge_on(*lane, p, task, task_id);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(lane);
    cv_.notify_one();
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(lane);
  cv_.notify_one();
}

// One candidate judged on one lane (judge_on's state): the task as the worker loaded it, the
// seeds, the watchdog's bounds, the current trial's tensors and tolerances.
struct GpuStage::Judgment {
  const CheckOptions& options_;
  const ca::bundle::Rules& rules_;
  const uint64_t base_seed_;
  Lane& lane;
  Prepared& p;
  const ca::Json& task;
  const std::string& task_id;
  ca::Json& check;
  ca::measure::StageClock& stages;
  std::string key;
  decltype(Lane::loaded)::iterator it;
  ca::bundle::IoSpec io;
  std::vector<uint64_t> seeds;
  double watchdog_s = 0, transfer_s = 0;
  double reference_ms = 0;  // the slowest reference call seen on these inputs
  ca::Json in_tensors, ref_tensors, params_tensors, trial_variant;
  std::string trial_calibration_note;  // a trial judged by the warm call's calibration: why
  bool calibrated = false;
  std::string claimed;
  std::optional<ca::worker::request::Calibrate> calibrate;
  ca::bundle::Tolerances trial_tolerances;
  std::string failed_what;  // the last draw that failed: its request and the worker's answer
  ca::Json failed_answer;
  int redrawn_alone = 0;    // draws made again with the candidate's runner ended (draw_beside_candidate)

  void lap(const char* stage) { stages.lap(stage); }
  void reference_failed(const std::string& what, const ca::Json& ans) {
    set_verdict(check, "reference_error", "reference worker: " + what + ": " + ans.value("error", "?") + ": " + ans.value("detail", ""));
    check["reference_error"] = true;
  }

  // The task loaded in the lane's worker and the plan bound to its tensors; false with a verdict
  // when the reference, the binding, the rules or a stochastic reference decide it already.
  bool load_and_bind() {
    // 1. The task in this lane's worker, under its content key: its specs bind the plan.
    key = ca::worker::request::task_key(task, task_id);
    // Loaded again when the worker process that loaded it is gone: a fresh one (one task per
    // process) would otherwise load it only on the first draw, emptying the worker's folder, where
    // the candidate's cubin is written below, after the write.
    it = lane.loaded.find(key);
    if (it == lane.loaded.end() || it->second.second != lane.worker->spawns()) {
      ca::Json ans = lane.worker->request(ca::worker::request::load(key, task));
      if (!ans.value("ok", false)) {
        reference_failed("load", ans);
        return false;
      }
      it = lane.loaded.insert_or_assign(key, std::make_pair(ans, lane.worker->spawns())).first;
    }
    lap("task_load");
    io = ca::bundle::IoSpec::from_load(it->second.first);  // its own peak_bytes sizes the scratch cap, never the record's
    const ca::bundle::Binding binding = ca::bundle::bind_candidate(p.candidate, io, lane.limits, &rules_);
    binding_fields(check, p.candidate, binding);
    if (binding.refused) {
      refuse(check, *binding.refused);
      return false;
    }
    // A reference no verdict can use, as this worker's load measured it (a record's flags decide
    // nothing): a stochastic one is one random draw (matching it is luck, missing it is not the
    // candidate's fault); an insensitive one is matched by a constant answer (reward for no work); an
    // ill-conditioned one fails every fp32 candidate (its own fp32 error is over every bound). Each
    // its own status, with correct null: reward-calc gives it neither a reward nor a -1.
    check["reference"] = reference_check(task, &it->second.first, options_.allow_stochastic);
    if (check["reference"]["stochastic"] == true) check["task_stochastic"] = true;
    if (auto v = task_verdict(check["reference"], options_.allow_stochastic, options_.tolerance == "calibrated")) {
      check[v->status] = true;
      set_verdict(check, v->status, v->reason);
      return false;
    }
    return true;
  }

  // The watchdog bounds one call, from the reference's own time on the same inputs (measured by the
  // worker; the task's recorded eager time until then).
  double watchdog_for(double eager_ms) const {
    return options_.timeout_s > 0 ? options_.timeout_s : std::max(2.0, eager_ms * 50 / 1000.0);
  }
  std::chrono::milliseconds watchdog() const {
    return std::chrono::milliseconds(static_cast<int64_t>((watchdog_s + transfer_s) * 1000));
  }
  static constexpr double kOneTimeAllowanceS = 20;
  double one_time_s() const { return watchdog_s + transfer_s + kOneTimeAllowanceS; }
  std::chrono::milliseconds one_time_bound() const { return std::chrono::milliseconds(static_cast<int64_t>(one_time_s() * 1000)); }

  // 2. Seeds, the watchdog's first bound, and how every trial is judged.
  void plan_trials() {
    // 2. Seeds: unpredictable unless --seed; each candidate gets its own sequence.
    uint64_t cand_hash = std::stoull(ca::sha256_hex(check.value("candidate_id", "") + p.candidate.compiled->key).substr(0, 15), nullptr, 16);
    for (int i = 0; i <= options_.trials; ++i) seeds.push_back(splitmix64(base_seed_ ^ cand_hash ^ (0x1000ULL * (i + 1))) >> 16);
    // The watchdog bounds one call, from the reference's own time on the same inputs (measured by the
    // worker below; the task's recorded eager time until then). One-time costs (module load, library
    // plan choice, graph capture, first touch) are paid in `load` and the untimed first call, which
    // get the watchdog plus an allowance for them: generous for those costs (milliseconds to a few
    // seconds on the H200), but not minutes, as candidate code runs there too (init, the first
    // forward) and a kernel that never returns holds the lane until the bound.
    watchdog_s = watchdog_for(task_eager_ms(task));
    // + the work around the call (inputs copied in on the device, inputs and params hashed), at a
    // conservative 20 GB/s.
    transfer_s = 3.0 + double(io.io_bytes()) / 2e10;
    // Every trial is judged by the bound of the precision the record claims, calibrated on that
    // trial's inputs (compare.hpp), unless --tolerance published or strict.
    calibrated = options_.tolerance == "calibrated";
    claimed = check.value("precision", std::string("fp32"));
    if (calibrated) {
      const ca::bundle::CalibrationRule rule = ca::bundle::calibration_rule(claimed);
      calibrate = ca::worker::request::Calibrate{claimed, rule.k, rule.floor, rule.floor_min};
    }
    trial_tolerances = ca::bundle::Tolerances::by_mode(calibrated ? "published" : options_.tolerance, options_.atol, options_.rtol);
  }

  // A trial's inputs, reference (and for the warm call, params), drawn by the worker; false with a
  // verdict when the reference fails.
  bool make_trial(uint64_t seed, const std::string& variant, bool with_params, bool report = true) {
    Draw d = draw(*lane.worker, key, seed, variant, with_params, calibrate);
    if (!d.failed.empty()) {
      failed_what = d.failed;
      failed_answer = d.answer;
      if (report) reference_failed(d.failed, d.answer);
      return false;
    }
    in_tensors = std::move(d.inputs);
    ref_tensors = std::move(d.reference);
    trial_variant = std::move(d.variant);
    if (with_params) params_tensors = std::move(d.params);
    reference_ms = std::max(reference_ms, d.forward_ms);
    if (calibrated) {
      trial_calibration_note.clear();
      if (with_params) {  // the warm call's: kernel-prof's bound for an output a timed call cannot calibrate (fill_calibration)
        if (!d.calibration.is_null()) check["calibration"] = d.calibration;
        if (!d.calibration_error.empty()) check["calibration_error"] = d.calibration_error;
      } else if (check.contains("calibration")) {
        // An output this trial could not calibrate is bounded by the warm call's calibration (GPU
        // memory held by the candidate's scratch could make the worker's float64 run fail).
        trial_calibration_note = ca::bundle::Tolerances::fill_calibration(d.calibration, d.calibration_error, check["calibration"]);
      }
      trial_tolerances = ca::bundle::Tolerances::calibrated(claimed, d.calibration, d.calibration_error, options_.atol,
                                                            options_.rtol);
    }
    return true;
  }

  static bool node_failed(const ca::Json& a) {
    const std::string err = a.value("error", "");
    return err == "out_of_memory" || (err == "crashed" && a.value("killed_from_outside", false));
  }

  void runner_failed(const ca::Json& a, const std::string& during) {
    std::string err = a.value("error", "runtime_error");
    if (err == "timeout")
      set_verdict(check, "timeout", during + ": no answer within " + ca::log::cat(during == "init" || during == "first call" ? one_time_s() : watchdog_s) +
                                        " s (watchdog killed the runner)");
    else if (err == "plan_error") set_verdict(check, "plan_error", a.value("detail", ""));
    else if (err == "incorrect") set_verdict(check, "incorrect", during + ": " + a.value("detail", ""));
    else if (node_failed(a)) {
      // The node, not the candidate (issue 32: environment failures are never verdicts): the GPU could
      // not hold the candidate's buffers (within the scratch cap) beside the reference's, or the runner
      // was killed from outside (SIGKILL that was not the watchdog's: the host's OOM killer, an operator).
      set_verdict(check, "node_error", during + ": " + a.value("detail", err));
      check["node_error"] = true;
    } else set_verdict(check, "runtime_error", during + ": " + a.value("detail", err));
  }

  // The candidate's runner ended (free), or loaded again with its outputs mapped (load: false with
  // the verdict when that load fails).
  struct Reload {
    std::function<void()> free;
    std::function<bool()> load;
  };

  // The candidate loaded in the lane's runner (init run) with its outputs mapped into `got`, or ended
  // with its runner (every byte it held freed).
  Reload reload_for(const ca::Json& load, ca::cuda::IpcMaps& out_maps, ca::bundle::DeviceOutputs& got) {
    Reload r;
    r.load = [this, &load, &out_maps, &got]() -> bool {
      ca::Json ans = lane.runner->request(load, one_time_bound());
      lap("runner_load");
      if (!ans.value("ok", false)) {
        runner_failed(ans, "init");
        return false;
      }
      auto& drv = ca::cuda::Driver::get();
      drv.check(drv.cuCtxSetCurrent(lane.ctx), "cuCtxSetCurrent");
      got.clear();
      for (const auto& [name, t] : ca::cuda::shared_tensors(ans.at("outputs_ipc"), "outputs_ipc"))
        got[name] = ca::bundle::DeviceOutput{t.dtype, t.shape, out_maps.map(t)};
      return true;
    };
    r.free = [this, &out_maps, &got] {
      out_maps.close();  // before the runner's buffers go
      got.clear();
      lane.runner->kill();
    };
    return r;
  }

  // A trial's draw while the runner holds the candidate: its buffers (within the scratch cap), its
  // kernels' local memory, cuDNN's workspace. When the worker ran out of GPU memory beside them (the
  // client's retry alone says so), the candidate is ended with its runner (every byte it held freed)
  // and the trial drawn again: a reference that fails with none of the candidate's memory on the GPU
  // is the node's or the task's (reference_error); one that succeeds is followed by the candidate
  // loaded again beside it. So no memory a candidate holds turns its verdict into no verdict.
  bool draw_beside_candidate(size_t t, const Reload& reload) {
    if (make_trial(seeds[t], variant_for_trial(t), false, false)) return true;
    if (!ca::worker::out_of_memory_alone(failed_answer)) {
      reference_failed(failed_what, failed_answer);
      return false;
    }
    ca::log::verbose("task ", task_id, ": trial ", t, ": the reference worker ran out of GPU memory beside the candidate; ",
                     "drawing again with the candidate's runner ended");
    reload.free();
    check["redrawn_alone"] = ++redrawn_alone;
    if (!make_trial(seeds[t], variant_for_trial(t), false)) return false;  // alone too: reference_error
    return reload.load();
  }

  // 4. The warm call, then fresh inputs for every trial right after it; false when a trial ended
  // the judging with a verdict of its own (reference or runner failed).
  bool run_trials(const ca::bundle::DeviceOutputs& got, const Reload& reload) {
    // 4. The warm call, then fresh inputs for every trial right after it.
    ca::Json trials = ca::Json::array();
    bool all_ok = true;
    std::string first_reason;
    double forward_ms_sum = 0;
    for (size_t t = 0; t < seeds.size(); ++t) {
      lap("calls");
      if (t > 0 && !draw_beside_candidate(t, reload)) return false;
      lap("worker_draws");
      uint32_t guard_seed = static_cast<uint32_t>(splitmix64(seeds[t] ^ 0xabcdef));
      // The warm call pays the one-time costs (lazy module loading, first touch): the generous bound.
      ca::Json run = lane.runner->request({{"op", "run"}, {"inputs_ipc", in_tensors}, {"guard_seed", guard_seed}, {"graph", options_.graph}},
                                          t == 0 ? one_time_bound() : watchdog());
      ca::Json trial = {{"seed", seeds[t]}, {"warm", t == 0}, {"variant", variant_for_trial(t)}};
      if (trial_variant.is_object()) {
        // The variant the worker applied (a milder one where the asked one made the reference non-finite).
        trial["variant"] = trial_variant.value("applied", std::string(variant_for_trial(t)));
        if (trial["variant"] != variant_for_trial(t)) trial["variant_asked"] = variant_for_trial(t);
      }
      if (!run.value("ok", false)) {
        runner_failed(run, t == 0 ? "first call" : "trial " + std::to_string(t));
        trials.push_back(trial);
        check["trials"] = trials;
        return false;
      }
      forward_ms_sum += run.value("forward_ms", 0.0);
      lap("calls");
      ca::bundle::CompareResult cmp;
      {
        ca::cuda::IpcMaps ref_maps;
        ca::bundle::DeviceOutputs want;
        for (const auto& [name, r] : ca::cuda::shared_tensors(ref_tensors, "reference"))
          want[name] = ca::bundle::DeviceOutput{r.dtype, r.shape, ref_maps.map(r)};
        cmp = ca::bundle::compare_outputs_device(got, want, trial_tolerances, nullptr);
      }
      lap("compare");
      trial.update(cmp.to_json());
      if (!trial_calibration_note.empty()) trial["tolerance"]["fallback"] = trial_calibration_note;
      std::string reason;
      if (!run["guards"].empty()) reason = run["guards"][0].get<std::string>();
      else if (!run["inputs_changed"].empty())
        reason = "the forward call changed " + run["inputs_changed"][0].get<std::string>() + " (inputs and params are read-only)";
      else if (run.contains("init_scratch_changed") && !run["init_scratch_changed"].empty())
        reason = "the forward call changed " + run["init_scratch_changed"][0].get<std::string>() +
                 ", which init wrote (init's scratch is read-only in forward: state kept across calls is refused)";
      else if (!cmp.ok) reason = cmp.reason;
      trial["ok"] = reason.empty();
      if (!reason.empty()) {
        trial["reason"] = reason;
        const std::string variant = trial["variant"].get<std::string>();
        if (all_ok)
          first_reason = (t == 0 ? "warm call: "
                                 : "trial " + std::to_string(t) + " (fresh inputs after a call" +
                                       (variant == "plain" ? std::string() : ", variant " + variant) + "): ") +
                         reason;
        all_ok = false;
      }
      trials.push_back(trial);
      if (!all_ok) break;  // one failure decides; the rest would only cost time
    }
    check["trials"] = trials;
    check["seed"] = base_seed_;
    check["tolerance"] = options_.tolerance;
    check["worker_confinement"] = lane.worker->confinement();  // what confined the task code that judged it
    if (options_.graph) check["graph"] = true;
    check["forward_ms_mean"] = forward_ms_sum / static_cast<double>(trials.size());
    if (all_ok) set_verdict(check, "passed", "all " + std::to_string(trials.size()) + " calls match the reference");
    else set_verdict(check, "incorrect", first_reason);
    return true;
  }
};

void GpuStage::judge_on(Lane& lane, Prepared& p, const ca::Json& task, const std::string& task_id) {
  ca::Json& check = p.check;
  check["gpu"] = lane.gpu;
  // Where a check's time goes (seconds per stage, in the record as check.stage_s and with -v): task
  // load, the worker's draws and references, the runner's load, the calls, the comparisons.
  ca::measure::StageClock stages;
  struct StageReport {
    const ca::measure::StageClock& s;
    ca::Json& check;
    const std::string& task_id;
    ~StageReport() {
      if (s.empty()) return;
      check["stage_s"] = s.to_json();
      ca::log::verbose("task ", task_id, ": ", s.text());
    }
  } stage_report{stages, check, task_id};
  Judgment j{options_, rules_, base_seed_, lane, p, task, task_id, check, stages};
  if (!j.load_and_bind()) return;
  j.plan_trials();

  // 3. The warm call's inputs, reference and params, kept on the GPU by the worker and shared by
  // CUDA IPC (no tensor crosses the host); then the runner loads the candidate.
  auto tmp = [&](const std::string& stem) { return lane.worker->temp_path(stem); };
  std::string cubin_path = tmp("cubin"), ptx_path = tmp("ptx");
  ca::write_file_atomic(cubin_path, p.candidate.compiled->cubin);
  ca::write_file_atomic(ptx_path, p.candidate.compiled->ptx);
  struct Cleanup {
    GpuStage::Lane& lane;
    std::vector<std::string> files;
    ~Cleanup() {
      for (auto& f : files) std::remove(f.c_str());
      try {
        lane.worker->request(ca::worker::request::release({"kc-in", "kc-ref", "kc-params"}));
      } catch (const std::exception&) {
      }
    }
  } cleanup{lane, {cubin_path, ptx_path}};

  j.lap("bind");
  if (!j.make_trial(j.seeds[0], variant_for_trial(0), true)) return;
  j.lap("worker_draws");
  ca::Json load = {{"op", "load"},        {"cubin", cubin_path}, {"ptx", ptx_path},           {"lowered", p.candidate.compiled->lowered},
                   {"plan", p.candidate.sources.plan}, {"io", j.io.to_json()},  {"params_ipc", j.params_tensors}, {"graph", options_.graph}};
  if (options_.timeout_s <= 0 && j.reference_ms > 0) j.watchdog_s = j.watchdog_for(j.reference_ms);
  check["watchdog_s"] = j.watchdog_s;
  // The candidate leaves the runner however its judging ends (a verdict, a load or a trial that
  // failed, a reference that failed mid-way, an exception): a runner that kept it would hold its
  // buffers (gigabytes at level 1) while this lane's worker loads and draws for the next candidate,
  // whose reference could then run out of GPU memory. Declared before the output mappings below, so
  // they are closed first (the runner frees those buffers on unload). A runner that is gone (killed
  // by the watchdog, crashed) is not started again just to unload.
  struct Unload {
    GpuStage::Lane& lane;
    Judgment& j;
    ~Unload() {
      try {
        if (lane.runner->alive()) lane.runner->request({{"op", "unload"}}, std::chrono::seconds(30));
        j.lap("runner_unload");
      } catch (const std::exception&) {
      }
    }
  } unload{lane, j};
  // The runner's output buffers, mapped here for the whole load: outputs are compared on the GPU,
  // in this process, against the worker's references (which never enter the runner).
  ca::cuda::IpcMaps out_maps;
  ca::bundle::DeviceOutputs got;
  const Judgment::Reload reload = j.reload_for(load, out_maps, got);
  if (!reload.load()) return;

  if (!j.run_trials(got, reload)) return;
  out_maps.close();  // before the runner frees the buffers
  j.lap("calls");
}

}  // namespace ca::kernel_check
