// ops-synth filter: one `filters` request (and a `similarity` request when decontaminating) per
// task, through N worker clients; kept tasks go on in input order, every drop is counted by reason.
#include "tools/ops-synth/filter.hpp"

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/store.hpp"
#include "libcommon/worker/requests.hpp"
#include "tools/ops-synth/pool.hpp"

namespace ca::ops_synth {

void FilterOptions::register_with(CLI::App* app) {
  app->add_option("-j,--jobs", jobs, "Reference workers in parallel (one Python process each)")->capture_default_str();
  app->add_option("--device", device, "auto (cuda:0 if a GPU worker starts, else cpu), cpu, or cuda:0,cuda:1,...")
      ->capture_default_str();
  app->add_option("--min-ms", min_ms, "Lowest eager time kept (GPU only)")->capture_default_str();
  app->add_option("--max-ms", max_ms, "Highest eager time kept (GPU only)")->capture_default_str();
  app->add_flag("!--no-compile", check_compile, "Skip the torch.compile run");
  app->add_flag("--keep-rejected", keep_rejected, "Also emit dropped tasks (filter.kept false, filter.reason)");
  app->add_option("--decontaminate", decontaminate, "Directory of KernelBench-format .py problems (repeatable)")
      ->check(CLI::ExistingDirectory);
  app->add_option("--threshold", threshold, "Drop when the max AST similarity to a problem exceeds this")
      ->capture_default_str();
  app->add_option("--timeout", timeout_s, "Seconds per worker request (a hang is killed)")->capture_default_str();
  app->add_option("--memory-retries", memory_retries,
                  "Times a task whose verdict was lost to GPU memory is judged again (then dropped as gpu_memory)")
      ->capture_default_str();
  app->add_option("--memory-wait", memory_wait_s, "Seconds before the first of them (doubling each time)")
      ->capture_default_str();
  app->add_option("--worker-memory", worker_memory_mb,
                  "Memory in MiB all reference workers together may hold (each of -j gets its share; resident sets of "
                  "its processes and the files it writes); 0: three quarters of this host's, at most 16 GiB each")
      ->capture_default_str();
}

namespace {

// One task through the filters; fills record["filter"]. Returns the drop reason ("" when kept).
// What a verdict depends on besides the task: an earlier verdict is reused (--resume) only when these
// are the same.
ca::Json verdict_options(const FilterOptions& opt) {
  ca::Json o = {{"min_ms", opt.min_ms}, {"max_ms", opt.max_ms}, {"check_compile", opt.check_compile}};
  if (!opt.decontaminate.empty()) {
    o["decontaminate"] = opt.decontaminate;
    o["threshold"] = opt.threshold;
  }
  return o;
}

// --decontaminate: the code's largest AST similarity to a problem under any of the folders, and which.
ca::Json similarity_section(ca::worker::WorkerClient& worker, const std::string& code, const FilterOptions& opt) {
  double best = 0;
  std::string best_program;
  for (const auto& dir : opt.decontaminate) {
    ca::Json s = worker.request(ca::worker::request::similarity(code, dir));
    if (!s.value("ok", false))
      throw ca::EnvironmentError("similarity against " + dir + " failed: " + s.value("detail", s.dump()));
    double m = s.value("max", 0.0);
    if (m > best || best_program.empty()) {
      best = m;
      best_program = s["program"].is_string() ? dir + "/" + s["program"].get<std::string>() : "";
    }
  }
  return ca::Json{{"max", best}, {"program", best_program}, {"threshold", opt.threshold}};
}

std::string judge(ca::worker::WorkerClient& worker, ca::Json& rec, const FilterOptions& opt) {
  std::string code = ca::get_required<std::string>(rec, "/code");
  std::string task_id = ca::get_optional<std::string>(rec, "/task_id").value_or(ca::task_id_for(rec));
  ca::worker::request::Filters filters;
  filters.task_id = task_id;
  filters.code = code;
  filters.min_ms = opt.min_ms;
  filters.max_ms = opt.max_ms;
  filters.check_compile = opt.check_compile;
  filters.mode = ca::worker::request::task_mode(rec);  // a bad mode: a bad record naming reference.mode
  if (rec.contains("init_inputs") && rec["init_inputs"].is_array()) filters.init_inputs = ca::Json(rec["init_inputs"]);
  const ca::Json req = filters.to_json();
  // Workers sharing a GPU take memory from one another: a verdict lost to it says nothing about the
  // task, so it is asked again once some of the others have finished theirs.
  ca::Json ans;
  int memory_retries = 0;
  for (double wait = opt.memory_wait_s;; wait *= 2) {
    ans = worker.request(req);
    if (!ans.value("lost_to_memory", false) || memory_retries >= opt.memory_retries) break;
    ++memory_retries;
    ca::log::verbose(task_id, ": a verdict was lost to GPU memory; asking again in ", wait, " s");
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  ca::Json section;
  std::string reason;
  if (!ans.value("ok", false)) {
    // timeout, worker_died, memory_limit: the task itself is the suspect.
    reason = ans.value("error", std::string("worker_error"));
    section["kept"] = false;
    section["reason"] = reason;
    section["detail"] = ans.value("detail", std::string());
  } else {
    bool kept = ans.value("kept", false);
    if (!kept) reason = ans["reason"].is_string() ? ans["reason"].get<std::string>() : "rejected";
    if (!kept && ans.value("lost_to_memory", false)) reason = "gpu_memory";  // after every retry
    section["kept"] = kept;
    section["reason"] = kept ? ca::Json(nullptr) : ca::Json(reason);
    section["verdicts"] = ca::Json(ans["verdicts"]);
    section["device"] = ans.value("device", std::string());
    if (ans.contains("seconds")) section["seconds"] = ans["seconds"];  // the worker's time on this task
    if (memory_retries) section["memory_retries"] = memory_retries;
    section["torch_version"] = ans.value("torch_version", std::string());
    // The worker's specs fill what the task record lacks (imported rows) and add the params.
    if (ans.contains("load") && ans["load"].is_object()) {
      const ca::Json& load = ans["load"];
      for (const char* key : {"inputs", "outputs", "init_inputs", "params"})
        if (!rec.contains(key) && load.contains(key)) rec[key] = ca::Json(load[key]);
      // The worker's measurement, whatever the record said (kernel-check's task_stochastic rule),
      // and the mode the reference ran in.
      set_reference(rec, ca::worker::request::reference_section(load, filters.mode));
    }
  }
  if (reason.empty() && !opt.decontaminate.empty()) {
    section["similarity"] = similarity_section(worker, code, opt);
    if (section["similarity"]["max"].get<double>() > opt.threshold) {
      reason = "contaminated";
      section["kept"] = false;
      section["reason"] = reason;
    }
  }
  section["options"] = verdict_options(opt);
  // What --resume gives back with the verdict: the reference as measured (its mode decides whether a
  // stored verdict fits a record at all).
  if (rec.contains("reference")) section["reference"] = rec["reference"];
  section["worker_confinement"] = worker.confinement();  // what confined the task's code when it ran
  rec["filter"] = std::move(section);
  return reason;
}

// --resume: the stored verdict for this task when it was made with the same options and the worker
// answered (a timeout, a dead worker or a verdict lost to GPU memory is judged again).
std::optional<ca::Json> stored_verdict(ca::Store& store, const std::string& task_id, const FilterOptions& opt,
                                      const std::string& mode) {
  auto prev = store.latest("filter_results", task_id);
  if (!prev || !prev->is_object() || !prev->contains("verdicts") || !prev->contains("options")) return std::nullopt;
  // A verdict on the reference in another mode (train vs eval) is another task's: judged again. One
  // stored before verdicts said their mode was made in train.
  const ca::Json* ref = prev->contains("reference") && (*prev)["reference"].is_object() ? &(*prev)["reference"] : nullptr;
  if ((ref && ref->contains("mode") ? (*ref)["mode"] : ca::Json("train")) != ca::Json(mode)) return std::nullopt;
  // Compared as canonical text: ordered JSON objects are equal only with their keys in the same order.
  if (ca::canonical_json((*prev)["options"]) != ca::canonical_json(verdict_options(opt))) return std::nullopt;
  if ((*prev).value("reason", ca::Json()) == "gpu_memory") return std::nullopt;  // the GPU's state, not the task's
  return prev;
}

}  // namespace

namespace {

// A task on its way: the drop reason its verdict gave ("" when kept).
struct FilterItem : ca::RecordItem {
  std::string reason;
};

// What a filter run adds to the record path's counts: kept, drops by reason, verdicts reused.
struct FilterTally {
  std::map<std::string, int64_t> drops;
  int64_t kept = 0, resumed = 0;
  ca::Json extra(double seconds) const {
    return ca::Json{{"kept", kept}, {"dropped", ca::Json(drops)}, {"resumed", resumed}, {"seconds", seconds}};
  }
};

}  // namespace

int run_filter(const ca::CommonOptions& common, const FilterOptions& opt) {
  for (const auto& d : opt.decontaminate)
    if (!std::filesystem::is_directory(d)) throw ca::UsageError("--decontaminate: no directory " + d);
  auto devices = resolve_devices(opt.device, opt.jobs, opt.timeout_s);
  auto store = ca::open_store_for(common, devices[0]);
  ca::worker::WorkerOptions worker;
  worker.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(opt.timeout_s * 1000));
  worker.memory_limit_mb = worker_memory_mb(opt.worker_memory_mb, opt.jobs);
  worker.read_dirs = opt.decontaminate;  // the similarity request reads the problems there
  worker.one_task_per_process = true;  // its tasks are what is being vetted: none may change another's
  auto workers = start_workers(opt.jobs, devices, worker);
  const auto started = std::chrono::steady_clock::now();

  ca::RecordPathOptions path_options;
  path_options.lanes = opt.jobs;
  path_options.window = 4 * static_cast<int64_t>(opt.jobs);
  path_options.store = store.get();
  path_options.progress_unit = "tasks";
  ca::RecordPath path(common, path_options);
  FilterTally tally;
  ca::RecordJob<FilterItem> job;
  job.admit = [&](FilterItem& item) {  // --resume: a verdict made with the same options is reused
    if (!common.resume || !store) return;
    std::lock_guard<std::mutex> lock(path.store_mutex());
    std::string mode;
    try {
      mode = ca::worker::request::task_mode(item.record);
    } catch (const ca::FieldError&) {
      return;  // a bad mode is judged (and reported) as a bad record, never resumed
    }
    if (auto prev = stored_verdict(*store, item.record.value("task_id", ca::task_id_for(item.record)), opt, mode)) {
      item.reason = (*prev)["reason"].is_string() ? (*prev)["reason"].get<std::string>() : "";
      if (prev->contains("reference") && (*prev)["reference"].is_object()) set_reference(item.record, (*prev)["reference"]);
      item.record["filter"] = *prev;
      item.resumed = true;
    }
  };
  job.work = [&](int lane, FilterItem& item) {
    item.reason = judge(*workers[static_cast<std::size_t>(lane)], item.record, opt);
    return item.reason.empty() ? ca::Outcome::done : ca::Outcome::failed;
  };
  job.emit = [&](FilterItem& item) {
    const bool kept = item.reason.empty();
    if (kept) ++tally.kept;
    else ++tally.drops[item.reason];
    item.write = kept || opt.keep_rejected;
    if (item.resumed) {
      ++tally.resumed;
    } else if (store) {
      std::lock_guard<std::mutex> lock(path.store_mutex());
      store->put_filter_result(item.record.value("task_id", ca::task_id_for(item.record)), kept, item.reason,
                               item.record["filter"]);
      if (kept) store->put_task(item.record);
    }
  };
  const int status = path.stream(job);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return path.end(status,
                  ca::log::cat("; ", tally.kept, " kept, dropped ", ca::Json(tally.drops).dump(),
                               tally.resumed ? ca::log::cat(", ", tally.resumed, " verdicts reused (--resume)") : "",
                               " in ", static_cast<int64_t>(secs), " s on ", devices[0], " x", opt.jobs),
                  tally.extra(secs));
}

}  // namespace ca::ops_synth
