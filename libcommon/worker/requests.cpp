// The reference worker's requests (see requests.hpp).
#include "libcommon/worker/requests.hpp"

#include <filesystem>

#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/worker/worker_client.hpp"

namespace ca::worker::request {

std::string task_mode(const Json& task) {
  if (!task.is_object() || !task.contains("reference") || task["reference"].is_null()) return "train";
  const Json& ref = task["reference"];
  if (!ref.is_object()) throw FieldError("reference", "expected an object {\"mode\": \"train\" | \"eval\", ...}");
  if (!ref.contains("mode") || ref["mode"].is_null()) return "train";
  const Json& mode = ref["mode"];
  if (!mode.is_string() || (mode != "train" && mode != "eval"))
    throw FieldError("reference.mode", mode.dump() + " is not a reference mode: \"train\" (as KernelBench runs models: "
                                       "BatchNorm on batch statistics, dropout live) or \"eval\"");
  return mode.get<std::string>();
}

Json reference_section(const Json& load_answer, const std::string& asked) {
  Json r{{"mode", load_answer.contains("mode") && load_answer["mode"].is_string() ? load_answer["mode"] : Json(asked)}};
  if (load_answer.contains("stochastic") && load_answer["stochastic"].is_boolean()) {
    r["stochastic"] = load_answer["stochastic"];
    if (load_answer.contains("stochastic_evidence")) r["evidence"] = load_answer["stochastic_evidence"];
  }
  // References no verdict can use (the load's numerics): a constant answer would match it
  // (insensitive), or its own fp32 error against float64 is over the cap of every bound
  // (ill_conditioned); null where the worker could not measure it. Records say them; judges measure.
  for (const char* key : {"insensitive", "ill_conditioned"}) {
    if (!load_answer.contains(key) || !(load_answer[key].is_boolean() || load_answer[key].is_null())) continue;
    r[key] = load_answer[key];
    const std::string ev = std::string(key) + "_evidence";
    if (load_answer.contains(ev) && load_answer[ev].is_object()) r[ev] = load_answer[ev];
  }
  // The reference's peak memory (the worker's peak.py): compile-only's scratch cap follows it.
  if (load_answer.contains("peak_bytes") && load_answer["peak_bytes"].is_number_integer())
    r["peak_bytes"] = load_answer["peak_bytes"];
  return r;
}

Json load(const std::string& task_id, const Json& task) {
  if (!task.contains("code") || !task["code"].is_string()) throw FieldError("task.code", "missing (the task's PyTorch source)");
  Json req{{"op", "load"}, {"task_id", task_id}, {"code", task["code"]}, {"init_seed", task_init_seed(task)},
           {"mode", task_mode(task)}};
  if (task.contains("init_inputs")) req["init_inputs"] = task["init_inputs"];
  return req;
}

std::string task_key(const Json& task, const std::string& task_id) {
  Json l = load(task_id, task);
  l.erase("op");
  l.erase("task_id");
  // Train is what every load ran before the mode was a field: a train task keeps the key it had
  // (stored baselines stay found); an eval task is another task by construction.
  if (l["mode"] == "train") l.erase("mode");
  return task_id + "@" + content_id(l);
}

Json unload(const std::string& task_id) { return {{"op", "unload"}, {"task_id", task_id}}; }

Json inputs(const std::string& task_id, uint64_t seed, const std::string& keep, const std::string& variant) {
  Json req{{"op", "inputs"}, {"task_id", task_id}, {"seed", seed}, {"keep", keep}};
  if (!variant.empty() && variant != "plain") req["variant"] = variant;
  return req;
}

Json reference(const std::string& task_id, const std::string& inputs_key, const std::string& keep,
               const std::optional<std::string>& params_keep, const std::optional<Calibrate>& calibrate) {
  Json req{{"op", "reference"}, {"task_id", task_id}, {"inputs_key", inputs_key}, {"keep", keep}};
  if (params_keep) req["params_keep"] = *params_keep;
  if (calibrate) {
    req["calibrate"] = calibrate->precision;
    req["calibrate_k"] = calibrate->k;
    req["calibrate_floor"] = calibrate->floor;
    req["calibrate_floor_min"] = calibrate->floor_min;
  }
  return req;
}

Json release(const std::vector<std::string>& keys, bool empty_cache) {
  Json r = {{"op", "release"}, {"keys", keys}};
  if (empty_cache) r["empty_cache"] = true;
  return r;
}

Json warm(bool compile) { return {{"op", "warm"}, {"compile", compile}}; }

Json similarity(const std::string& code, const std::string& dir) {
  // Absolute: the worker runs in its own folder, not the tool's.
  std::error_code ec;
  auto abs = std::filesystem::absolute(dir, ec);
  return {{"op", "similarity"}, {"code", code}, {"dir", ec ? dir : abs.string()}};
}

Json Filters::to_json() const {
  Json req{{"op", "filters"},
           {"task_id", task_id},
           {"code", code},
           {"eager_time_range_ms", {min_ms, max_ms}},
           {"check_compile", check_compile},
           {"mode", mode}};
  if (init_inputs) req["init_inputs"] = *init_inputs;
  return req;
}

Json Time::to_json() const {
  return {{"op", "time"},         {"task_id", task_id},   {"mode", mode},         {"precision", precision},
          {"metric", metric},     {"warmup", warmup},     {"min_runs", min_runs}, {"max_runs", max_runs},
          {"budget_s", budget_s}, {"rel_ci", rel_ci},     {"input_sets", input_sets},
          {"flush_bytes", flush_bytes}, {"seed", seed}};
}

}  // namespace ca::worker::request
