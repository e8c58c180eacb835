// One kernel-check for as long as the tool runs (a stream, or a service's lifetime): the rules,
// the tasks, the device, the store, the GPU stage (its lanes keep their reference worker, runner
// and loaded tasks) and the record path (record_path.hpp) every record goes through. check() judges
// a sequence of records; the stream and the service both call it, so a record is handled the same
// way in both.
#pragma once
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/cli.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/store.hpp"
#include "libcommon/task_lookup.hpp"
#include "libcommon/bundle/rules.hpp"
#include "tools/kernel-check/cpu_stage.hpp"
#include "tools/kernel-check/options.hpp"

namespace ca::kernel_check {

class GpuStage;

class Checker {
 public:
  // Opens the store (the run row), the device and the judge; `options.arch` is settled here.
  Checker(CheckOptions& options, const ca::CommonOptions& common);
  ~Checker();

  // Judges the records of `next` in input order on the record path (compiles and GPU lanes overlap;
  // each record is stored, then given to `write`). A bad input line ends the input: the records
  // before it are finished and written, then the error is rethrown. Thread-safe: a service calls it
  // per request. `shard`: only this shard's records (the stream's).
  ca::Counts check(const ca::RecordSource& next, const ca::RecordSink& write, bool shard = false);
  // The stream: common.input to common.output, this shard; then summary() (an input error's code).
  int stream();

  // Totals over every check() so far on stderr, the run row closed with `exit_code` (default: 3
  // when a candidate could not be run for want of a GPU, else 0); returns that code.
  int summary(std::optional<int> exit_code = std::nullopt);

  // As a service: a record's task is taken per `client_tasks`, an unknown task_id and a
  // candidate_id that is not its content's hash are bad records.
  void serve(ca::ClientTasks client_tasks);
  // Why candidates cannot be judged here (no GPU and not --compile-only), or empty.
  std::string unavailable() const;

  // The GPUs the judge runs on ({ordinal, name, uuid}), empty for compile-only or without one.
  ca::Json gpus_json() const;
  bool compile_only() const { return options_.compile_only; }

 private:
  struct Item;
  ca::RecordJob<Item> job();
  ca::Outcome process(Item& item);
  bool resume(Item& item, const std::string& judged_by);
  Prepared prepare(const ca::Json& rec, const std::optional<ca::Json>& task);
  void tally(Item& item);

  CheckOptions& options_;
  const ca::CommonOptions& common_;
  ca::bundle::Rules rules_;
  ca::bundle::Rules cpu_rules_;  // the CPU stage's: rules_, the scratch cap left to a GPU judge's worker
  ca::TaskLookup tasks_;  // the record's task, --tasks, the store
  bool serving_ = false;
  std::string no_device_why_;
  std::string judged_by_;  // how this run judges (judged_by): a stored verdict is reused only if judged alike
  std::vector<int> gpus_;
  ca::Json gpus_json_ = ca::Json::array();
  ca::bundle::CandidateOptions candidate_;  // the CPU stage's: arch, cache, the rules
  std::unique_ptr<ca::Store> store_;
  std::unique_ptr<GpuStage> judge_;
  std::unique_ptr<ca::RecordPath> path_;  // its store mutex guards the store: read on lanes, written in order
  std::mutex totals_mu_;
  std::mutex compile_mu_;  // compiles at once, all requests together: at most options_.jobs
  std::condition_variable compile_cv_;
  int compiling_ = 0;
  std::map<std::string, int64_t> by_status_;
  int64_t no_device_ = 0;
};

}  // namespace ca::kernel_check
