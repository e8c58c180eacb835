// Where a candidate's task comes from, one rule for every tool that needs the task: the record's own
// `task` object, then --tasks FILE (JSON Lines of task records, by task_id), then the run store,
// then the record itself when it is a task record carrying a bundle (it has `code`).
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "libcommon/jsonl.hpp"
#include "libcommon/store.hpp"

namespace ca {

class TaskLookup {
 public:
  // Reads --tasks FILE now (empty path: none); a task record without a task_id is keyed by its
  // content id (task_id_for), as ops-synth names it. Bad lines: the reader's error (file:line).
  explicit TaskLookup(const std::string& tasks_path = "");
  // The task of `record` (whose task_id is `task_id`), or nothing when no source has it. The store
  // is read under `store_mu` when one is given (a store shared with other threads).
  std::optional<Json> find(const Json& record, const std::string& task_id, Store* store,
                             std::mutex* store_mu = nullptr) const;
  size_t size() const { return tasks_.size(); }

 private:
  std::map<std::string, Json> tasks_;
};

}  // namespace ca
