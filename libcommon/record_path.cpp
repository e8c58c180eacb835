// The one record path (see record_path.hpp).
#include "libcommon/record_path.hpp"

#include <cstdlib>
#include <iostream>
#include <memory>

#include "libcommon/log.hpp"
#include "libcommon/signals.hpp"
#include "libcommon/store.hpp"

namespace ca {

RecordPath::RecordPath(const CommonOptions& options, RecordPathOptions path)
    : options_(options), path_(std::move(path)) {
  if (path_.lanes < 1) throw UsageError("-j must be at least 1");
}

RecordSource reader_source(RecordReader& reader) {
  return [&reader](Json& record, std::string& where) {
    if (!reader.next(record)) return false;
    where = reader.where();
    return true;
  };
}

RecordSource lines_source(std::vector<Line>& lines, std::function<bool()> cancelled) {
  auto next = std::make_shared<std::size_t>(0);
  return [&lines, cancelled = std::move(cancelled), next](Json& record, std::string& where) {
    if (*next == lines.size() || (cancelled && cancelled())) return false;
    Line& line = lines[(*next)++];
    record = std::move(line.record);
    where = line.where;
    return true;
  };
}

OrderedLoopOptions RecordPath::loop_options() const {
  OrderedLoopOptions o;
  o.lanes = path_.lanes;
  o.window = path_.window;
  o.stop = path_.stop;
  return o;
}

// Steps 1-3 up to the job's admit: the next record of this shard, its ids checked.
bool RecordPath::next_item(const RecordSource& source, RecordItem& item, Call& call, bool shard) {
  if (call.copies_left > 0) {  // the next copy of a good record, admitted again
    item.record = call.pending.record;
    item.where = call.pending.where;
    item.copy = path_.copies - call.copies_left--;
    return true;
  }
  for (;;) {
    if (!source(item.record, item.where)) return false;
    ++call.read;
    if (!shard || options_.shard.contains(record_key(item.record))) break;
    ++call.other_shard;
    ++call.unticked;
  }
  guard(item, [&] { check_record_ids(item.record); });
  return true;
}

// After the admit of a record's first copy: a good one, not resumed, is copied `copies` times.
void RecordPath::copied(const RecordItem& item, Call& call) {
  if (item.copy != 0 || item.bad || item.resumed || path_.copies <= 1) return;
  call.pending.record = item.record;
  call.pending.where = item.where;
  call.copies_left = path_.copies - 1;
}

void RecordPath::ended(const OrderedLoopEnd& end, Call& call) {
  if (!end.reader_blocked) return;
  close(call);
  if (end.failure) {
    // A record's work failed (a kernel-prof child whose GPU context is gone) while the reader waits
    // for a line its writer sends only after this process answers: report it, close what is open
    // (run rows get the true status), and end with its status.
    int code = kExitInternal;
    try {
      std::rethrow_exception(end.failure);
    } catch (const Error& e) {
      report_error(e);
      code = e.exit_code;
    } catch (const std::exception& e) {
      log::error("internal error: ", e.what());
    }
    signals::run_cleanups(code);
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(code);
  }
  if (path_.reader_blocked) path_.reader_blocked();
  log::error("the input's reader is blocked after a stop: ending here");
  std::_Exit(kExitInternal);
}

void RecordPath::guard(RecordItem& item, const std::function<void()>& step) {
  try {
    step();
  } catch (const FieldError& e) {
    item.bad = e;
  }
}

bool RecordPath::settle(RecordItem& item, Call& call) {
  if (progress_) progress_->tick(1 + call.unticked.exchange(0));
  if (!item.bad) return true;
  const FieldError& e = *item.bad;
  if (path_.bad_left_out.empty()) {
    mark_bad_record(item.record, e, options_.tool, item.where, options_.strict);  // throws under --strict
  } else {
    if (options_.strict) throw InputError(item.where + ": " + e.field + ": " + e.reason);
    log::warn(item.where, ": ", e.field, ": ", e.reason, " (", path_.bad_left_out, ")");
    item.write = false;
  }
  ++call.counts.bad;
  return false;
}

void RecordPath::finish(RecordItem& item, Call& call, const RecordSink& sink) {
  if (!item.bad) {
    const Outcome outcome = item.resumed ? Outcome::skipped : item.outcome;
    switch (outcome) {
      case Outcome::done: ++call.counts.done; break;
      case Outcome::failed: ++call.counts.failed; break;
      case Outcome::skipped: ++call.counts.skipped; break;
      case Outcome::passed: ++call.counts.passed; break;
    }
    const bool finished = outcome == Outcome::done || outcome == Outcome::failed;
    if (path_.store && item.store && finished && !path_.section.empty() && item.record.contains(path_.section) &&
        item.record[path_.section].is_object()) {
      std::lock_guard<std::mutex> lock(store_mu_);
      if (item.record.contains("candidate_id")) path_.store->put_section(path_.section, item.record);
      else log::verbose(item.where, ": its ", path_.section, " is not stored (no candidate_id)");
    }
  }
  if (item.write) sink(item.record);
}

Counts RecordPath::close(Call& call) {
  Counts counts = call.counts;
  counts.read = call.read.load();
  counts.other_shard = call.other_shard.load();
  if (progress_) progress_->tick(call.unticked.exchange(0));
  add(counts);
  return counts;
}

void RecordPath::add(const Counts& counts) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_ += counts;
}

Counts RecordPath::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

int RecordPath::end(int status, const std::string& detail, const Json& extra) {
  const Counts counts = totals();
  log::info(counts.text(), detail);
  if (path_.store) {
    Json row = counts.to_json();
    for (auto& [key, value] : extra.items()) row[key] = value;
    path_.store->end_run(status, row);
  }
  return status;
}

}  // namespace ca
