// The one task lookup (task_lookup.hpp).
#include "libcommon/task_lookup.hpp"

#include "libcommon/ids.hpp"

namespace ca {

TaskLookup::TaskLookup(const std::string& tasks_path) {
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
