// The run store: one SQLite file (WAL), schema versioned by PRAGMA user_version, every write its own
// transaction so a kill -9 loses at most the record in flight (DESIGN.md §10).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "libcommon/jsonl.hpp"

struct sqlite3;

namespace ca {

struct CommonOptions;

// The identity of a baseline measurement: the same task on the same GPU, driver, torch and method
// gives the same number, so it is measured once (DESIGN.md §6).
struct BaselineKey {
  std::string task_id, gpu_name, driver, torch_version, method;  // method: e.g. "compile/default/device/v1"
  std::string text() const;
};

class Store {
 public:
  static constexpr int kSchemaVersion = 2;
  // Set by begin_run for the processes a run starts; a run begun with it set records it as its parent.
  static constexpr const char* kParentRunVariable = "CUDA_AGENT_PARENT_RUN";
  static const std::vector<std::string>& table_names();

  // Opens (creating if needed) and migrates. Throws EnvironmentError when it cannot, and before
  // writing anything when the file is another program's SQLite database. Read-only: on read-only
  // media a cleanly closed store is opened immutable (no -shm can be made there).
  explicit Store(const std::string& path, bool read_only = false);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  int schema_version();

  // Provenance (like samtools' @PG): one row per tool invocation. A row its tool does not end
  // (an error, a signal) is closed with the exit status by Cli::run or the signal path.
  std::string begin_run(const CommonOptions& options, const std::string& gpu = "");
  void set_run_gpu(const std::string& gpu);
  void end_run(int exit_status, const Json& counts = Json::object());
  const std::string& run_id() const { return run_id_; }

  void put_task(const Json& task);  // needs task_id
  void put_candidate(const Json& candidate);  // needs candidate_id, task_id
  void put_check(const std::string& candidate_id, const std::string& task_id, const Json& check);
  void put_profile(const std::string& candidate_id, const std::string& task_id, const Json& prof);
  void put_reward(const std::string& candidate_id, const std::string& task_id, const Json& reward);
  void put_episode(const std::string& candidate_id, const std::string& task_id, const Json& episode);
  void put_ppo_step(const std::string& step_id, const Json& metrics);
  void put_filter_result(const std::string& task_id, bool kept, const std::string& reason, const Json& detail);
  void put_baseline(const BaselineKey& key, const Json& timing);
  // A result section of a record ("check", "prof", "reward" or "episode") by the record's
  // candidate_id and task_id: what a tool's record loop stores of each record it finished.
  void put_section(const std::string& section, const Json& record);

  std::optional<Json> get_task(const std::string& task_id);
  std::optional<Json> get_baseline(const BaselineKey& key);
  // Body of the newest row (by its run's start) of a per-run result table for a key: the candidate_id
  // in checks, profiles, rewards and episodes, the task_id in filter_results.
  std::optional<Json> latest(const std::string& table, const std::string& key);

  // Rows of any SELECT as JSON objects (column name -> value; `body` columns parsed).
  void query(const std::string& sql, const std::function<void(const Json&)>& row);
  // Fold another store in; rows already present are skipped, so merging twice changes nothing.
  // Returns rows added per table. The store itself (same device and inode) is a UsageError. The input
  // is checked first (PRAGMA quick_check, every JSON column parses): a damaged one is an InputError
  // naming it, and nothing of it is merged. Inputs of older schemas merge by column name.
  Json merge_from(const std::string& other_path);
  // Per-run counts and rates, and an "all" line over the newest check/profile/reward per candidate.
  Json summary();

  // Runs `body` in one transaction (BEGIN IMMEDIATE ... COMMIT; ROLLBACK on an exception).
  void in_transaction(const std::function<void()>& body);
  // Routes a record of any kind to its tables (task, candidate and its check/prof/reward/episode
  // sections, ppo metrics) in one transaction. Returns the kind it was stored as. A missing or
  // mistyped id (a number, an empty string) is a FieldError.
  std::string import_record(const Json& record);

  sqlite3* handle() { return db_; }

 private:
  void exec(const std::string& sql);
  void migrate();
  void insert(const std::string& sql, const std::vector<std::string>& text_args,
              const std::vector<std::optional<double>>& number_args = {});

  // Before every write: the path still names the file opened (device and inode). A store replaced
  // (mv, cp over a new inode) or removed under a running tool is an EnvironmentError, never rows
  // written on into an unlinked file.
  void check_identity();

  std::string path_;
  sqlite3* db_ = nullptr;
  std::string run_id_;
  std::optional<std::pair<uint64_t, uint64_t>> identity_;  // (st_dev, st_ino) at open; none when read-only
};

// A whole, verified copy of a store (judge-node.sh publishes with it): SQLite's backup API reads the
// pages a killed writer left in its -wal too; the copy is written beside `to`, switched to one
// self-contained file (journal_mode DELETE), checked (quick_check, every table's row count equal to
// the source's), synced and renamed into place. Returns rows per table. A damaged or foreign source
// is an InputError, a failed write an EnvironmentError; `to` is then untouched.
Json copy_store(const std::string& from, const std::string& to);

// --no-store gives nullptr; otherwise the store opened and a run begun.
std::unique_ptr<Store> open_store_for(const CommonOptions& options, const std::string& gpu = "");

}  // namespace ca
