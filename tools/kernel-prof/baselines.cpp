// Baselines through the reference worker, cached in the store.
#include "tools/kernel-prof/baselines.hpp"

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/worker/requests.hpp"

namespace ca::kernel_prof {

std::string baseline_method(const std::string& mode, const std::string& precision, const std::string& metric,
                            int input_sets, double flush_factor) {
  // L2 flush before every call, CUDA events around the call, input sets rotated, median
  // reported. v1: device metric = torch.profiler kernel sums per call; v2: their busy time (the
  // union of their intervals), as the candidate's; v3: with the kernels launched by no op (a CUDA
  // graph's replay, torch.cuda._sleep), which v2 missed, so such a baseline looked faster than it
  // ran; v4: the flush reads its buffer (clean lines left) where v1-v3's memset left dirty lines
  // whose write-back every call paid. A store's older baselines are not compared.
  return log::cat(mode, "/", precision, "/", metric, "/sets=", input_sets, "/flush=", flush_factor, "xL2-read/v4");
}

Json BaselineTimer::load_task(const Json& task) {
  const std::string task_id = task["task_id"].get<std::string>();
  if (auto it = gpu_.loaded_tasks.find(task_id); it != gpu_.loaded_tasks.end()) return it->second;
  Json req = worker::request::load(task_id, Json(task));
  Json answer = gpu_.worker().request(req);
  if (!answer.value("ok", false))
    throw FieldError("task", "the reference worker could not load task " + task_id + ": " + answer.value("error", std::string("?")) +
                                 ": " + answer.value("detail", std::string()));
  gpu_.loaded_tasks[task_id] = answer;
  return answer;
}

Json BaselineTimer::time(const std::string& task_id, const std::string& mode, const std::string& precision,
                         const std::string& metric, int input_sets) {
  const std::string method = baseline_method(mode, precision, metric, input_sets, 2.0);
  BaselineKey key{task_id, gpu_.identity().name, gpu_.identity().driver, gpu_.torch_version(), method};
  if (!options_.refresh) {
    if (auto it = gpu_.baselines.find(key.text()); it != gpu_.baselines.end()) {
      Json b = it->second;
      b["cached"] = true;
      return b;
    }
  }
  if (store_ && !options_.refresh) {
    if (auto cached = store_->get_baseline(key)) {
      gpu_.baselines[key.text()] = *cached;
      Json b = *cached;
      b["cached"] = true;
      return b;
    }
  }
  worker::request::Time req;
  req.task_id = task_id;
  req.mode = mode;
  req.precision = precision;
  req.metric = metric;
  req.warmup = options_.warmup;
  req.min_runs = options_.stop.min_runs;
  req.max_runs = options_.stop.max_runs;
  req.budget_s = options_.baseline_budget_s;
  req.rel_ci = options_.stop.rel_ci;
  req.input_sets = input_sets;
  req.flush_bytes = static_cast<int64_t>(gpu_.flusher().bytes());
  req.seed = options_.seed;
  Json a = gpu_.worker().request(req.to_json());
  Json b{{"mode", mode}, {"precision", precision}};
  if (!a.value("ok", false)) {
    b["error"] = a.value("error", std::string("?"));
    b["detail"] = a.value("detail", std::string());
    log::warn("baseline ", mode, "/", precision, " of task ", task_id, ": ", b["error"].get<std::string>(), ": ",
              b["detail"].get<std::string>());
    return b;  // not cached: a failure may be transient
  }
  const Json dev = a.value("device_time_us", Json(nullptr));
  if (metric == "device" && !dev.is_object()) {
    // Never event time in place of kernel sums: the candidate's side is kernel sums.
    b["error"] = "no_device_time";
    std::string why = "no reason given";
    if (a.contains("method") && a["method"].is_object() && a["method"].contains("device_time_error") &&
        a["method"]["device_time_error"].is_string())
      why = a["method"]["device_time_error"].get<std::string>();
    b["detail"] = "the profiler gave no kernel times (" + why + "); event time is not compared with kernel sums";
    b["event_time_us"] = a["time_us"];
    log::warn("baseline ", mode, "/", precision, " of task ", task_id, ": ", b["detail"].get<std::string>());
    return b;  // not cached: a failure may be transient
  }
  b["time_us"] = metric == "device" ? dev : a["time_us"];
  b["metric"] = metric;
  b["event_time_us"] = a["time_us"];
  b["device_time_us"] = dev;
  b["compile_s"] = a.value("compile_s", Json(nullptr));
  b["method"] = a.value("method", Json::object());
  b["torch_version"] = a.value("torch_version", gpu_.torch_version());
  b["key"] = key.text();
  if (store_) store_->put_baseline(key, b);
  gpu_.baselines[key.text()] = b;
  b["cached"] = false;
  return b;
}

}  // namespace ca::kernel_prof
