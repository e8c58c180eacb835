// The record contract's pieces (counts, bad records, ids, record keys) and RecordLoop, the one
// record path (record_path.hpp) for a job of one record on one lane.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/store.hpp"

namespace ca {

enum class Outcome { done, failed, skipped, passed };  // passed: not this tool's business, passed on as is

struct Counts {
  int64_t read = 0, done = 0, failed = 0, skipped = 0, passed = 0, bad = 0, other_shard = 0;
  Json to_json() const;
  std::string text() const;  // "12 done, 3 failed, 0 skipped, 1 bad record"
  Counts& operator+=(const Counts& other);
};

// One parsed input line and where it was ("line N", as a tool reading stdin names it).
struct Line {
  Json record;
  std::string where;
};
// Every record of a JSON Lines text (a service's request body), all parsed before any is judged:
// the first line that is not a JSON object throws InputError naming it, as on stdin.
std::vector<Line> parse_lines(const std::string& text);
// The records as JSON Lines, written as RecordWriter writes them.
std::string dump_lines(const std::vector<Json>& records);

// Adds an `error` section {tool, field, reason, line} and warns; under --strict throws InputError
// naming the line and the field instead.
void mark_bad_record(Json& record, const FieldError& error, const std::string& tool, const std::string& where,
                     bool strict);

// Throws FieldError when candidate_id or task_id is there but is not a non-empty string: a mistyped
// id is a bad record (an error section, fatal under --strict), never a record without that id.
void check_record_ids(const Json& record);

// The key a record is sharded and resumed by: candidate_id, else task_id, else its content id.
std::string record_key(const Json& record);

// Lines of a regular file (the records a tool will read, for its progress line); -1 for "-", a pipe
// or anything that cannot be counted without consuming it.
int64_t count_lines(const std::string& path);

// The one record path (record_path.hpp) on one lane, for a tool whose job is a function of the
// record alone: its stream, counted, and the counts on stderr at its end.
class RecordLoop {
 public:
  explicit RecordLoop(const CommonOptions& options);
  // Calls `job` on every record of this shard, in order, and writes it (unless the job returns
  // skipped and `drop_skipped` is set). FieldError from the job becomes a bad record.
  // Returns the exit code: 0, or that of what ended it (a line that is not JSON, --strict), reported.
  int run(const std::function<Outcome(Json&)>& job, bool drop_skipped = false);
  const Counts& counts() const { return counts_; }
  // The store gets `section` ("prof", "reward") of every record the job finished (done or failed),
  // here, after the job: a tool's job never writes its results to the store itself.
  void store_into(Store* store, std::string section) {
    store_ = store;
    section_ = std::move(section);
  }

 private:
  const CommonOptions& options_;
  Counts counts_;
  Store* store_ = nullptr;
  std::string section_;
};

}  // namespace ca
