// The profiler: candidate, baselines, speedups (see profiler.hpp).
#include "tools/kernel-prof/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ca/version.hpp"

#include "libcommon/bundle/candidate.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/measure/gpu_lock.hpp"
#include "libcommon/measure/stage_clock.hpp"
#include "libcommon/measure/gpu_state.hpp"
#include "libcommon/worker/requests.hpp"
#include "tools/kernel-prof/baselines.hpp"
#include "tools/kernel-prof/candidate.hpp"
#include "tools/kernel-prof/gpu_session.hpp"
#include "tools/kernel-prof/multi_gpu.hpp"
#include "tools/kernel-prof/roofline.hpp"

namespace ca::kernel_prof {

bool check_passed(const Json& record) {
  if (!record.contains("check") || record["check"].is_null()) return false;
  if (!record["check"].is_object()) throw FieldError("check", "expected an object, got " + std::string(record["check"].type_name()));
  const bool correct = get_required<bool>(record, "/check/correct");
  if (correct) get_optional<std::string>(record, "/check/precision");  // read when it is timed: refused mistyped here
  return correct;
}

Profiler::Profiler(const ProfOptions& options, const CommonOptions& common, Store* store)
    : options_(options), common_(common), store_(store), tasks_(options.tasks_path) {
  if (!options_.tasks_path.empty()) log::verbose("--tasks: ", tasks_.size(), " tasks from ", options_.tasks_path);
}

Profiler::~Profiler() = default;

Json Profiler::find_task(const Json& record, const std::string& task_id) {
  if (auto t = tasks_.find(record, task_id, store_)) return *t;
  throw FieldError("task", "task " + task_id + " not found (give --tasks FILE, a `task` object, or a store holding it)");
}

GpuSession& Profiler::gpu() {
  if (!gpu_) {
    gpu_ = std::make_unique<GpuSession>(options_.gpus.front(), !options_.no_cupti);
    // One reference worker per GPU: each its share of --worker-memory (a --gpus lane's child is
    // handed its share already, and has one GPU).
    gpu_->set_worker_memory_mb(worker::worker_memory_share_mb(options_.worker_memory_mb, static_cast<int>(options_.gpus.size())));
    gpu_->set_one_task_per_worker(options_.one_task_per_worker);
    if (store_) store_->set_run_gpu(gpu_->identity().name + " " + gpu_->identity().uuid);
  }
  return *gpu_;
}

void Profiler::warm_up() {
  GpuSession& g = gpu();
  g.make_current();
  (void)g.torch_version();  // starts the worker: python, import torch, CUDA context
  // Shared, as kernel-check's runs: the warm-up's few kernels never run inside another profile's
  // timed loop on this GPU.
  measure::GpuLock lock(g.identity().uuid, options_.lock_timeout_s, measure::GpuLock::Mode::shared);
  bool compile = false;
  for (const auto& mode : options_.baselines) compile = compile || mode != "eager";
  Json a = g.worker().request(worker::request::warm(compile), std::chrono::milliseconds(300000));
  if (a.value("ok", false))
    log::verbose("warmed up: ", a.value("warmed", Json::object()).dump());
  else  // the first record pays it then, and says what fails
    log::verbose("warm-up: ", a.value("error", std::string("?")), ": ", a.value("detail", std::string()));
}

Json Profiler::gpu_json() const { return gpu_ ? gpu_->identity().to_json() : Json(nullptr); }

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
Json clock_json(const std::optional<int>& mhz) { return mhz ? Json(*mhz) : Json(nullptr); }
std::string underscored(std::string s) {
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}
}  // namespace

Json gpu_kind_of(const Json& identity) {
  auto text = [&](const char* key) {
    return identity.is_object() && identity.contains(key) && identity[key].is_string() ? identity[key] : Json(nullptr);
  };
  return Json{{"name", text("name")}, {"arch", text("arch")}};
}

std::string timed_by(const ProfOptions& o, const std::string& task_key, const Json& record, const Json& gpu_kind) {
  auto field = [](const Json& j, const char* key) { return j.is_object() && j.contains(key) ? j[key] : Json(nullptr); };
  const Json check = field(record, "check");
  std::vector<std::string> baselines = o.baselines;  // a set: the order they are asked in changes nothing
  std::sort(baselines.begin(), baselines.end());
  baselines.erase(std::unique(baselines.begin(), baselines.end()), baselines.end());
  const Json how = {{"tool", "kernel-prof"},
                    {"version", kVersion},
                    {"build", build_identity()},
                    {"task", task_key},
                    {"candidate_id", field(record, "candidate_id")},
                    {"bundle", content_id(field(record, "bundle"))},
                    // What of the check the timed calls are judged by (candidate.cpp's FreshInputs).
                    {"check", {{"tolerance", field(check, "tolerance")},
                               {"calibration", field(check, "calibration")},
                               {"precision", field(check, "precision")}}},
                    // The rules the loaded code is held to again (candidate.cpp): another rules file
                    // may refuse what this one let through.
                    {"rules", o.rules.identity()},
                    {"metric", o.metric},
                    {"baselines", baselines},
                    {"stop", o.stop.to_json()},
                    {"baseline_budget_s", o.baseline_budget_s},
                    {"warmup", o.warmup},
                    {"input_sets", o.input_sets},
                    {"margin", o.margin},
                    {"remeasure", o.remeasure},
                    // A run without --seed draws its own: a profile timed under a known seed is not one of those.
                    {"seed", o.seed_given ? Json(o.seed) : Json(nullptr)},
                    {"cupti", !o.no_cupti},
                    {"metrics", o.metrics},
                    {"gpu", gpu_kind}};
  return content_id(how);
}

Json Profiler::gpu_kind() {
  if (gpu_) return gpu_kind_of(gpu_->identity().to_json());
  if (!gpu_kind_) {
    try {
      gpu_kind_ = gpu_kind_of(measure::identify_gpu(options_.gpus.front()).to_json());  // no context: the driver's word
    } catch (const std::exception& e) {
      log::verbose("--resume: no GPU here to compare a stored profile's with (", e.what(), ")");
      gpu_kind_ = Json(nullptr);
    }
  }
  return *gpu_kind_;
}

std::optional<Json> Profiler::stored_profile(const Json& record, const std::string& task_key) {
  const std::string candidate_id = record.value("candidate_id", std::string());
  if (!common_.resume || !store_ || candidate_id.empty()) return std::nullopt;
  auto prev = store_->latest("profiles", candidate_id);
  if (!prev || !prev->is_object()) return std::nullopt;
  const std::string status = string_or_empty(*prev, "status");  // a row that does not say is timed again
  if (status != "timed" && status != "failed") return std::nullopt;
  // Timed as this run would time it: the same task content, candidate, check's bound, options, kind
  // of GPU and release. On a host without a GPU nothing could be timed again: the stored profile is
  // reused for the GPU that timed it (its `gpu` says which) when everything else is the same.
  Json kind = gpu_kind();
  if (kind.is_null()) kind = gpu_kind_of(prev->value("gpu", Json(nullptr)));
  const std::string want = timed_by(options_, task_key, record, kind);
  const std::string had = string_or_empty(*prev, "timed_by");
  if (had != want) {
    log::verbose(candidate_id, ": the stored profile (", status, ") was timed otherwise (timed_by ",
                 had.empty() ? std::string("none") : had, ", this run's ", want,
                 ": the task's content, the check's bound, options, GPU or release): timed again");
    return std::nullopt;
  }
  return prev;
}

Outcome Profiler::profile_in_child(Json& record, const std::string& task_id) {
  const std::string why = "a candidate's kernels killed this process's GPU context (" + gpu_->why_dead() + ")";
  if (is_child()) throw Error(kExitContextLost, why + ": a fresh child times the records after it");
  if (!child_allowed_) throw EnvironmentError(why + ": nothing more can be timed in this process; restart the service");
  if (!child_) {
    log::warn(why, ": the records after it are timed by a fresh kernel-prof process");
    child_ = std::make_unique<GpuChild>(common_, options_.gpus.front(), /*own_store=*/false,
                                        worker::worker_memory_share_mb(options_.worker_memory_mb, static_cast<int>(options_.gpus.size())));
  }
  // The child has no store: it gets the task this process found (a stream's tasks are its user's).
  Json sent = record;
  const bool task_added = !sent.contains("task");
  if (task_added) sent["task"] = find_task(record, task_id);
  Json answer = parse_record_line(child_->ask(sent), "the kernel-prof child's output");
  if (task_added) answer.erase("task");
  record = std::move(answer);
  if (!record.contains("prof")) return Outcome::passed;
  return get_optional<std::string>(record, "/prof/status") == "failed" ? Outcome::failed : Outcome::done;
}

namespace {

// A baseline's median time and its relative interval, when it has them.
std::optional<std::pair<double, std::optional<double>>> median_of(const Json& b) {
  if (!b.contains("time_us") || !b["time_us"].is_object() || !b["time_us"].contains("median")) return std::nullopt;
  const Json& tj = b["time_us"];
  std::optional<double> ci;
  if (tj.contains("rel_ci") && tj["rel_ci"].is_number()) ci = tj["rel_ci"].get<double>();
  return std::make_pair(tj["median"].get<double>(), ci);
}

int open_decisions(const Json& d) {
  int n = 0;
  for (auto& [mode, x] : d.items()) n += x.value("ambiguous", false) ? 1 : 0;
  return n;
}

// One passing record's profile as it is built (Profiler::profile's state): the candidate's timing,
// the method, the baselines and the notes. One metric on both sides (DESIGN.md §7): the busy time of
// the call's kernels (the union of their intervals: their sum when none overlap) from CUPTI for the
// candidate against the same from torch.profiler for the baselines ("device"),
// or CUDA events on both ("wall"). When the candidate's device time is missing, nothing is
// compared: no speedup, and the record says why.
struct ProfileRun {
  GpuSession& g;
  const ProfOptions& options_;
  Json& record;
  const Json& task;
  const Json& loaded;
  const std::string& task_id;
  CandidateTiming& cand;
  Json& prof;
  const std::chrono::steady_clock::time_point started;
  const std::string metric_used = options_.metric;
  Json notes = Json::array();
  Json method;
  Json base = Json::object();

  bool have_device() const { return !cand.loop.device_us.empty(); }
  const measure::Summary& chosen() const { return metric_used == "device" ? cand.loop.device : cand.loop.event; }

  void start_method() {
    if (!cand.loop.cupti_note.empty()) notes.push_back(cand.loop.cupti_note);
    if (!cand.loop.host_bound_note.empty()) notes.push_back(cand.loop.host_bound_note);
    method = options_.stop.to_json();
    method["metric"] = metric_used;
    method["warmup_calls"] = options_.warmup;
    // Every call, warm-up, timed or checked, on a set no earlier call saw (drawn untimed by the worker).
    method["input_sets"] = "fresh per call";
    method["checked_calls"] = cand.checked_calls;
    method["draw_ms_per_call"] = cand.draw_ms_per_call;
    method["seed"] = options_.seed;
    method["seed_given"] = options_.seed_given;
    method["flush_bytes"] = g.flusher().bytes();
    method["flush"] = g.flusher().method_name();
    method["persisting_l2_reset"] = g.flusher().resets_persisting();
    if (g.flusher().persisting_set_aside() >= 0) method["persisting_l2_set_aside_bytes"] = g.flusher().persisting_set_aside();
    method["call_state_reset"] = "fresh inputs; outputs, forward scratch, library workspaces and the shared memory of every SM filled with bytes drawn for the call; module memory restored; before every call";
    method["timer"] = "cuda_events around cuGraphLaunch";
  }

  // The candidate's times (and the method's counts) as measured so far.
  void fill_times() {
    method["device_timer"] = have_device() ? "cupti concurrent-kernel records, busy time per call (the union of the kernels' intervals)" : "none";
    method["stop"] = measure::stop_reason_name(cand.loop.stop);
    method["calls"] = cand.loop.calls;
    method["checked_calls"] = cand.checked_calls;
    method["timed_wall_s"] = cand.loop.timed_wall_s;
    if (!cand.loop.host_us.empty())
      method["host_bound"] = Json{{"host_us", measure::summarize(cand.loop.host_us).median},
                                  {"overhead_us", measure::summarize(cand.loop.host_overhead_us).median},
                                  {"kernels_per_call", cand.loop.kernels_per_call},
                                  {"floor_us", measure::summarize(cand.loop.host_floor_us).median},
                                  {"held", !cand.loop.host_bound_note.empty()}};
    prof["method"] = method;
    const bool comparable = metric_used == "wall" || have_device();
    prof["time_us"] = comparable ? chosen().to_json() : Json(nullptr);
    prof["event_time_us"] = cand.loop.event.to_json();
    prof["device_time_us"] = have_device() ? cand.loop.device.to_json() : Json(nullptr);
    Json kernels = Json::array();
    for (const auto& k : cand.loop.kernels) kernels.push_back(k.to_json());
    prof["kernels"] = kernels;
    prof["outputs_check"] = cand.outputs_check;
  }

  // Margin decisions: any the intervals leave open sends the candidate back for more timed calls.
  Json decisions() const {
    Json d = Json::object();
    if (!prof["time_us"].is_object() || chosen().median <= 0) return d;
    for (auto& [mode, b] : base.items())
      if (auto tb = median_of(b))
        d[mode] = measure::decide_margin(chosen().median, chosen().rel_ci, tb->first, tb->second, options_.margin).to_json();
    return d;
  }

  // The record's prof says the timed outputs were wrong.
  Outcome failed(const std::string& reason) {
    prof["status"] = "failed";
    prof["correct"] = false;
    prof["reason"] = reason;
    prof["notes"] = notes;
    prof["profile_s"] = seconds_since(started);
    record["prof"] = prof;
    return Outcome::failed;
  }

  // More timed calls while a margin decision is inside the intervals (up to --remeasure rounds);
  // the rounds run, or nullopt after a round whose outputs were wrong (then prof says so).
  std::optional<int> remeasure() {
    int rounds = 0;
    for (Json d = decisions(); open_decisions(d) > 0 && rounds < options_.remeasure; d = decisions()) {
      ++rounds;
      CandidateTiming more = time_candidate(g, record, task, loaded, options_, rounds);
      release_sets(g, more);
      if (!more.outputs_ok) {
        failed("wrong when timed (remeasure round " + std::to_string(rounds) + "): " + more.failure);
        return std::nullopt;
      }
      cand.append_round(more, rounds);
      if (!more.loop.host_bound_note.empty()) notes.push_back(more.loop.host_bound_note);
      fill_times();
    }
    return rounds;
  }

  // Baselines, with the same method and the same input seeds; precision-matched ones too when the
  // kernel computes in reduced precision (TF32 on, or autocast to fp16/bf16; int8 and fp8 kernels are
  // matched with fp16 autocast, the lowest precision PyTorch runs these tasks in).
  void time_baselines(BaselineTimer& baselines, const std::string& task_key, const std::string& precision,
                      measure::StageClock& stages) {
    for (const auto& mode : options_.baselines) {
      base[mode] = baselines.time(task_key, mode, "fp32", metric_used, options_.input_sets);
      stages.lap("baseline_" + mode);
    }
    std::string matched = precision == "int8" || precision == "fp8" ? "fp16" : precision;
    if (matched == "tf32" || matched == "fp16" || matched == "bf16") {
      prof["matched_precision"] = matched;
      for (const auto& mode : options_.baselines)
        base[mode + "_precision_matched"] = baselines.time(task_key, mode, matched, metric_used, options_.input_sets);
      stages.lap("baselines_matched");
    }
    prof["baselines"] = base;
  }

  // The margin decisions, speedups, notes and metrics of a timed candidate: prof is complete.
  void conclude(int rounds, measure::StageClock& stages) {
    Json final_decisions = decisions();
    prof["margin_decisions"] = final_decisions;
    prof["remeasured"] = rounds;
    if (open_decisions(final_decisions) > 0)
      notes.push_back(log::cat("a margin decision is still inside the measured intervals after ", rounds,
                               " more rounds (reward-calc marks it within_noise)"));
    auto speedup = [&](const Json& b) -> Json {
      auto tb = median_of(b);
      if (!tb || !prof["time_us"].is_object() || chosen().median <= 0) return nullptr;
      return tb->first / chosen().median;
    };
    for (auto& [mode, b] : base.items()) prof["speedup_vs_" + underscored(mode)] = speedup(b);
    if (metric_used == "wall")
      notes.push_back("wall metric: eager and compile times include PyTorch's Python launch overhead per call; the "
                      "candidate's is one CUDA-graph launch");
    if (options_.metrics) {
      prof["metrics"] = kernel_metrics(g, record, task, loaded, cand, options_);
      stages.lap("metrics");
    }
    prof["status"] = "timed";
    prof["correct"] = true;
    prof["notes"] = notes;
    prof["profile_s"] = seconds_since(started);
    prof["stage_s"] = stages.to_json();
    log::verbose(record.value("candidate_id", task_id), ": ", stages.text());
    record["prof"] = prof;
    log::verbose(record.value("candidate_id", task_id), ": ", chosen().median, " us (", metric_used, "), vs eager ",
                 prof.value("speedup_vs_eager", Json(nullptr)).dump(), ", vs compile ",
                 prof.value("speedup_vs_compile", Json(nullptr)).dump());
  }
};

}  // namespace

namespace {
// The GPU could not hold this candidate's timing (NodeMemoryError): no verdict. prof keeps what says
// where and how it was to be timed (the GPU, timed_by, the worker's confinement, the lock's wait)
// and says node_error (correct null: reward-calc gives no reward and no -1); the record is counted
// failed, stored (--resume times it again: only timed and failed profiles are reused) and the run
// goes on with the next record.
Outcome node_error(Json& record, const Json& prof, const std::string& why, std::chrono::steady_clock::time_point started) {
  Json out = {{"status", "node_error"}, {"correct", nullptr}, {"node_error", true}, {"reason", why}, {"notes", Json::array()}};
  for (const char* key : {"gpu", "timed_by", "worker_confinement", "lock_wait_s", "reference"})
    if (prof.contains(key)) out[key] = prof[key];
  out["profile_s"] = seconds_since(started);
  record["prof"] = std::move(out);
  log::warn(record.value("candidate_id", record.value("task_id", std::string("?"))), ": not timed (node_error): ", why);
  return Outcome::failed;
}
}  // namespace

GpuSession& Profiler::timing_gpu() {
  try {
    return gpu();
  } catch (const EnvironmentError& e) {
    throw EnvironmentError(std::string(e.what()) +
                           ": a record passed its check and needs a GPU to be timed (records whose check failed "
                           "pass through without one)");
  }
}

Outcome Profiler::profile(Json& record) {
  if (!check_passed(record)) return Outcome::passed;
  const std::string task_id = get_required<std::string>(record, "/task_id");
  (void)bundle::read_bundle(record);  // a passing check needs its bundle to be timed: FieldError before the GPU
  Json task = find_task(record, task_id);
  // From here the task is named by its content key (worker::request::task_key): the worker loads it
  // under it, and the baselines are cached under it, so an id reused for other code never shares them.
  task["task_id"] = worker::request::task_key(task, task_id);
  const std::string task_key = task["task_id"].get<std::string>();
  // --resume: a profile of this candidate already in the store, timed as this run would time it
  // (timed_by), is reused; on a host without a GPU, one timed on any GPU (its `gpu` says which).
  if (auto prev = stored_profile(record, task_key)) {
    record["prof"] = *prev;
    log::verbose(record.value("candidate_id", task_id), ": profile reused from the store (--resume)");
    return Outcome::skipped;
  }
  if (gpu_ && gpu_->dead()) return profile_in_child(record, task_id);
  return profile_here(record, task, task_id, task_key);
}

Outcome Profiler::profile_here(Json& record, const Json& task, const std::string& task_id, const std::string& task_key) {
  GpuSession& g = timing_gpu();  // first: without a GPU no passing record can be timed (exit 3)
  g.make_current();
  // The precision the record's check claims; the timing goes by the one read from the compiled
  // candidate (the baselines it is compared with follow it), and says so when they differ.
  const std::string claimed = get_optional<std::string>(record, "/check/precision").value_or("fp32");

  const auto started = std::chrono::steady_clock::now();
  measure::StageClock stages;  // where this record's time goes: prof.stage_s, and -v
  measure::GpuLock lock(g.identity().uuid, options_.lock_timeout_s);
  stages.lap("lock_wait");

  Json prof;
  prof["gpu"] = g.identity().to_json();
  prof["timed_by"] = timed_by(options_, task_key, record, gpu_kind_of(prof["gpu"]));  // --resume reuses it only alike
  prof["worker_confinement"] = g.worker().confinement();  // what confined the task code of the reference
  prof["lock_wait_s"] = lock.waited_s();
  auto clock_start = measure::sm_clock_mhz(g.identity().pci_bus_id);

  BaselineTimer baselines(g, store_, options_);
  Json loaded = baselines.load_task(task);
  stages.lap("task_load");
  // The mode the reference ran in for this timing (the worker's word), as every verdict repeats it.
  prof["reference"] = Json{{"mode", worker::request::reference_section(loaded, worker::request::task_mode(task))["mode"]}};

  CandidateTiming cand;
  try {
    cand = time_candidate(g, record, task, loaded, options_);
  } catch (const NodeMemoryError& e) {
    return node_error(record, prof, e.what(), started);
  }
  stages.lap("candidate");
  const std::string precision = cand.precision.empty() ? claimed : cand.precision;
  prof["precision"] = precision;
  if (!cand.precision.empty() && cand.precision != claimed) prof["check_precision_said"] = claimed;
  struct Cleanup {
    GpuSession& g;
    const CandidateTiming& t;
    ~Cleanup() { release_sets(g, t); }
  } cleanup{g, cand};
  auto clock_end = measure::sm_clock_mhz(g.identity().pci_bus_id);
  prof["sm_clock_mhz"] = {{"start", clock_json(clock_start)}, {"end", clock_json(clock_end)}};

  ProfileRun run{g, options_, record, task, loaded, task_id, cand, prof, started};
  run.start_method();
  run.fill_times();

  if (!cand.outputs_ok) {
    const Outcome o = run.failed((cand.refused ? "refused on this GPU (untimed): " : "wrong when timed: ") + cand.failure);
    log::warn(record.value("candidate_id", task_id), ": ", prof["reason"].get<std::string>());
    return o;
  }
  if (run.metric_used == "device" && !run.have_device())
    prof["no_speedup"] = "the candidate has no device time (" + cand.loop.cupti_note +
                         "): kernel sums are never compared with event times";

  run.time_baselines(baselines, task_key, precision, stages);
  std::optional<int> remeasured;
  try {
    remeasured = run.remeasure();
  } catch (const NodeMemoryError& e) {
    return node_error(record, prof, e.what(), started);
  }
  if (!remeasured) return Outcome::failed;
  const int rounds = *remeasured;
  if (rounds > 0) stages.lap("remeasure");
  run.conclude(rounds, stages);
  return Outcome::done;
}

}  // namespace ca::kernel_prof
