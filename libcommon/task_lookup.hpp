// Where a candidate's task comes from, one rule for every tool that needs the task: the record's own
// `task` object, then --tasks FILE (JSON Lines of task records, by task_id), then the run store,
// then the record itself when it is a task record carrying a bundle (it has `code`).
// A task a client sends (the record's `task`, or the record itself) is task code the tool will run:
// a service refuses it unless started with --accept-tasks, and then takes it only when it hashes to
// the record's task_id (task_id_for), so no client can put its task under another task's id.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "libcommon/jsonl.hpp"
#include "libcommon/store.hpp"

namespace ca {

enum class ClientTasks {
  trusted,   // a stream: its input is the user's own, like --tasks
  verified,  // a service with --accept-tasks: taken when it hashes to its task_id
  refused,   // a service: FieldError naming `task` (or `code`)
};

// Throws FieldError when `record` carries task code (a `task` object, or `code` of its own) that
// `policy` does not take: refused, or not hashing to `task_id` under verified.
void screen_client_task(const Json& record, const std::string& task_id, ClientTasks policy);

// Throws FieldError naming candidate_id when the record's candidate_id is not the content id of its
// task_id and bundle (candidate_id_for): what a stored verdict or profile is keyed by must be what was
// judged. A record without candidate_id, task_id or bundle passes (the tool asks for what it needs).
void verify_candidate_id(const Json& record);

// The key a task's loaded state and measurements are kept under (a worker's loaded tasks, baselines):
// the hash of what the worker runs (code, init_inputs, inputs, seed), never an id a record chose.
std::string task_cache_key(const Json& task);

class TaskLookup {
 public:
  // Reads --tasks FILE now (empty path: none); a task record without a task_id is keyed by its
  // content id (task_id_for), as ops-synth names it. Bad lines: the reader's error (file:line).
  explicit TaskLookup(const std::string& tasks_path = "", ClientTasks client = ClientTasks::trusted);
  void set_client_tasks(ClientTasks client) { client_ = client; }
  ClientTasks client_tasks() const { return client_; }
  // The task of `record` (whose task_id is `task_id`), or nothing when no source has it. The store
  // is read under `store_mu` when one is given (a store shared with other threads). FieldError for a
  // task the client sent that the policy does not take (screen_client_task).
  std::optional<Json> find(const Json& record, const std::string& task_id, Store* store,
                             std::mutex* store_mu = nullptr) const;
  size_t size() const { return tasks_.size(); }

 private:
  std::map<std::string, Json> tasks_;
  ClientTasks client_ = ClientTasks::trusted;
};

}  // namespace ca
