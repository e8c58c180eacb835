// The one task lookup (task_lookup.hpp).
#include "libcommon/task_lookup.hpp"

#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"

namespace ca {

void screen_client_task(const Json& record, const std::string& task_id, ClientTasks policy) {
  if (policy == ClientTasks::trusted) return;
  const bool own_task = record.contains("task") && !record["task"].is_null();
  const bool is_task = record.contains("code");
  if (!own_task && !is_task) return;
  const char* field = own_task ? "task" : "code";
  if (policy == ClientTasks::refused)
    throw FieldError(field, std::string("this service does not run task code that clients send (it was started without "
                                        "--accept-tasks): send task_id only; its tasks come from --tasks and the store"));
  const Json& task = own_task ? record["task"] : record;
  if (!task.is_object()) throw FieldError(field, std::string("expected a task object, got ") + task.type_name());
  if (!task.contains("code") || !task["code"].is_string()) throw FieldError(field, "a task needs its code (a string)");
  const std::string content = task_id_for(task);
  if (content != task_id)
    throw FieldError("task_id", "'" + task_id + "' is not the content id of the task sent with it (" + content +
                                    "): a task sent to a service is taken only under its own content id");
}

void verify_candidate_id(const Json& record) {
  if (!record.contains("candidate_id") || !record.contains("task_id") || !record.contains("bundle")) return;
  const Json& cid = record["candidate_id"];
  const Json& tid = record["task_id"];
  if (!cid.is_string() || !tid.is_string()) return;  // check_record_ids names a mistyped id
  const std::string expected = candidate_id_for(tid.get<std::string>(), record["bundle"]);
  if (cid.get<std::string>() != expected)
    throw FieldError("candidate_id", "'" + cid.get<std::string>() + "' is not the content id of this record's task_id and "
                                     "bundle (" + expected + "): a stored verdict is reused, and stored, only under the id of "
                                     "what was judged");
}

std::string task_cache_key(const Json& task) {
  Json key = Json::object();
  for (const char* field : {"code", "init_inputs", "inputs", "seed"})
    if (task.contains(field)) key[field] = task[field];
  // The reference's mode is part of what runs (train, the default, keeps the keys of before).
  if (task.contains("reference") && task["reference"].is_object() && task["reference"].contains("mode") &&
      task["reference"]["mode"].is_string() && task["reference"]["mode"] != "train")
    key["reference_mode"] = task["reference"]["mode"];
  return content_id(key);
}

TaskLookup::TaskLookup(const std::string& tasks_path, ClientTasks client) : client_(client) {
  if (tasks_path.empty()) return;
  RecordReader reader(tasks_path);
  Json r;
  while (reader.next(r)) {
    std::string id = r.contains("task_id") && r["task_id"].is_string() ? r["task_id"].get<std::string>() : task_id_for(r);
    tasks_[id] = std::move(r);
  }
}

std::optional<Json> TaskLookup::find(const Json& record, const std::string& task_id, Store* store,
                                       std::mutex* store_mu) const {
  screen_client_task(record, task_id, client_);
  if (record.contains("task") && record["task"].is_object()) return record["task"];
  if (auto it = tasks_.find(task_id); it != tasks_.end()) return it->second;
  if (store) {
    std::unique_lock<std::mutex> lock;
    if (store_mu) lock = std::unique_lock<std::mutex>(*store_mu);
    if (auto t = store->get_task(task_id)) return t;
  }
  if (record.contains("code") && record["code"].is_string()) return record;
  return std::nullopt;
}

}  // namespace ca
