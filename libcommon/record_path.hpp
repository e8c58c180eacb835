// The one record path of every streaming tool, with or without -j (DESIGN.md §1): records read with
// their line numbers, ids checked, the shard filter, --resume, bad records and --strict, the counts,
// store rows, output in input order, and the run's end (the counts on stderr, the run row closed,
// the exit status). A tool supplies what it does to one record; the path runs it on libcommon's
// ordered loop, on one lane or on -j lanes, the same code either way.
//
// In input order, for every record:
//   1. the source yields it and where it was ("line N"); a line that is not JSON ends the input:
//      the records before it are finished and written, then the error is rethrown (exit 2);
//   2. a record of another shard (--shard i/n, by record_key) is counted and dropped;
//   3. its ids are checked (check_record_ids), then the job's `admit` runs on the reader thread
//      (--resume: a record already done is marked `resumed` and not worked); a good record becomes
//      `copies` items (its copy 1.. admitted again), a bad one stays one;
//   4. the job's `work` runs on one of the lanes (a tool's per-lane state is indexed by lane);
//   5. on the calling thread, in input order: a FieldError from 3 or 4 makes it a bad record (an
//      error section and a warning; under --strict exit 2 naming line and field, after every record
//      before it is written; a tool whose records end with it leaves it out instead: bad_left_out);
//      else the job's `emit` sees it; it is counted, its store row written (the path's section, for
//      a done or failed record with a candidate_id), and it is written.
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "libcommon/ordered_loop.hpp"
#include "libcommon/record_loop.hpp"

namespace ca {

class Store;

// One record on its way through the path. A tool's item derives from it to carry what its job
// decides (a drop reason, a status) from the lane to `emit`.
struct RecordItem {
  Json record;
  std::string where;                // "line N", as messages name it
  Outcome outcome = Outcome::done;  // what `work` returned
  bool resumed = false;             // `admit` found it done by an earlier run: not worked, counted skipped
  int copy = 0;                     // which of the record's RecordPathOptions::copies this item is
  bool write = true;                // `emit` may clear it: counted, not written (a dropped task)
  bool store = true;                // clear it: no store row under the path's section
  std::optional<FieldError> bad;    // a FieldError from the ids check, `admit` or `work`
};

// The next record and where it was; false at the end. An Error it throws ends the input (step 1).
using RecordSource = std::function<bool(Json& record, std::string& where)>;
using RecordSink = std::function<void(const Json& record)>;
// A reader's records, each with its line ("line N").
RecordSource reader_source(RecordReader& reader);
// A service request's records (parse_lines), moved out one by one until `cancelled` (its client left).
RecordSource lines_source(std::vector<Line>& lines, std::function<bool()> cancelled);

// What a tool does to one record. Only `work` is required.
template <class Item>
struct RecordJob {
  std::function<void(Item&)> admit;              // reader thread, in input order; may throw FieldError
  std::function<Outcome(int lane, Item&)> work;  // a lane; may throw FieldError (a bad record)
  std::function<void(Item&)> emit;               // calling thread, in order, a good record before it is counted
};

struct RecordPathOptions {
  int lanes = 1;                // -j: records worked at once
  int64_t window = 0;           // records in flight at most; 0: twice the lanes
  int copies = 1;               // items per good record (agent-run's episodes per task), each admitted
  std::function<bool()> stop;   // an interrupt: as OrderedLoopOptions::stop
  // After a stop that left the source blocked in a read (a slow pipe), its thread still uses the
  // path's frame: this is called instead of returning, and must end the process (std::_Exit).
  std::function<void()> reader_blocked;
  Store* store = nullptr;       // store rows and the run row; may be null (--no-store)
  std::string section;          // the section stored for a done or failed record ("prof", "reward")
  std::string progress_unit = "records";  // the progress line's unit on a terminal
  // For a tool whose records end with it (run-store import, a training batch): a bad record is left
  // out, as this says ("not imported"), instead of passed on with an error section.
  std::string bad_left_out;
};

class RecordPath {
 public:
  RecordPath(const CommonOptions& options, RecordPathOptions path = {});

  // Records of `source` through `job`, each given to `sink` in input order. Returns this call's
  // counts (added to the totals, also when it throws). Thread-safe: a service calls it per request.
  template <class Item>
  Counts run(const RecordSource& source, const RecordJob<Item>& job, const RecordSink& sink, bool shard = false);

  // The tool's stream: options.input to options.output, this shard only, a progress line on a
  // terminal. Returns 0, or the exit code of the error that ended it (reported on stderr).
  template <class Item>
  int stream(const RecordJob<Item>& job);

  // The run's end, one shape for every tool: the totals on stderr (then `detail`), the run row closed
  // with them (and `extra`'s keys) and `status`, which is returned.
  int end(int status, const std::string& detail = "", const Json& extra = Json::object());
  Counts totals() const;
  void set_store(Store* store) { path_.store = store; }  // a store opened once the input is read
  void add(const Counts& counts);  // counts taken outside run() (a service's other records)
  const RecordPathOptions& options() const { return path_; }
  // Held while the path writes a store row: a tool that reads or writes the store on its lanes
  // (a --resume lookup) holds it too.
  std::mutex& store_mutex() { return store_mu_; }

 private:
  struct Call {
    std::atomic<int64_t> read{0}, other_shard{0}, unticked{0};
    Counts counts;  // the emitting thread's
    RecordItem pending;  // the reader's: a good record's next copies
    int copies_left = 0;
  };
  bool next_item(const RecordSource& source, RecordItem& item, Call& call, bool shard);
  void copied(const RecordItem& item, Call& call);
  void ended(const OrderedLoopEnd& end, Call& call);
  static void guard(RecordItem& item, const std::function<void()>& step);
  bool settle(RecordItem& item, Call& call);  // step 5 up to the job's emit: false for a bad record
  void finish(RecordItem& item, Call& call, const RecordSink& sink);
  Counts close(Call& call);
  OrderedLoopOptions loop_options() const;

  const CommonOptions& options_;
  RecordPathOptions path_;
  mutable std::mutex mu_;  // totals_
  std::mutex store_mu_;
  Counts totals_;
  log::Progress* progress_ = nullptr;  // the stream's, while it runs
};

template <class Item>
Counts RecordPath::run(const RecordSource& source, const RecordJob<Item>& job, const RecordSink& sink, bool shard) {
  static_assert(std::is_base_of_v<RecordItem, Item>, "a record path's item derives from RecordItem");
  Call call;
  OrderedLoopEnd end;
  try {
    end = run_ordered<Item>(
        loop_options(),
        [&](Item& item) {
          if (!next_item(source, item, call, shard)) return false;
          if (!item.bad && job.admit) guard(item, [&] { job.admit(item); });
          copied(item, call);
          return true;
        },
        [&](int lane, Item& item) {
          if (!item.bad && !item.resumed) guard(item, [&] { item.outcome = job.work(lane, item); });
        },
        [&](Item& item) {
          if (settle(item, call) && job.emit) job.emit(item);
          finish(item, call, sink);
        });
  } catch (...) {
    close(call);
    throw;
  }
  ended(end, call);
  return close(call);
}

template <class Item>
int RecordPath::stream(const RecordJob<Item>& job) {
  log::Progress progress(path_.progress_unit);
  if (progress.enabled())  // a file: done/total and time left
    if (const int64_t lines = count_lines(options_.input); lines >= 0) progress.set_total(lines * path_.copies);
  progress_ = &progress;
  int status = kExitOk;
  try {
    RecordReader reader(options_.input);
    RecordWriter writer(options_.output);
    run<Item>(reader_source(reader), job, [&](const Json& record) { writer.write(record); }, true);
  } catch (const Error& e) {
    report_error(e);
    status = e.exit_code;
  }
  progress.finish();
  progress_ = nullptr;
  return status;
}

}  // namespace ca
