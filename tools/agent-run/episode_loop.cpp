// agent-run's episodes on -j threads.
#include "tools/agent-run/episode_loop.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <map>
#include <random>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/ordered_loop.hpp"
#include "libcommon/record_loop.hpp"
#include "tools/agent-run/episode.hpp"
#include "tools/agent-run/text.hpp"

namespace ca::agent {

namespace {
// Only atomics here.
void on_signal(int sig) {
int none = 0;
agent::g_signal.compare_exchange_strong(none, sig);
agent::g_interrupted = true;
}

}  // namespace

void install_signal_handlers() {
  // From here on an interrupt is an orderly stop, never a half-written run.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;  // reads and writes of other threads go on; the loops poll the flag
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

namespace {
// One episode (or a bad input record, written as it is) on its way through the loop.
struct EpisodeItem {
  agent::EpisodeInput ep;
  bool first_of_task = false;  // the store gets the task with it
  bool bad = false;
  ca::Json out;
};
}  // namespace

int run_episodes(Options& o, const CommonOptions& opt, Policy& policy, std::unique_ptr<Store>& store) {
  auto& [tasks_file, policy_spec, jobs, per_task, first_uid, s, po, extra_text, workspace_dir, no_logprobs, skill] = o;
  const Json policy_description = policy.describe();
  ca::RecordReader reader(tasks_file.empty() ? opt.input : tasks_file);
  ca::RecordWriter writer(opt.output);
  ca::log::Progress progress("episodes");  // on a terminal: done/total, rate, time left
  if (progress.enabled())
    if (int64_t n = ca::count_lines(tasks_file.empty() ? opt.input : tasks_file); n > 0) progress.set_total(n * per_task);
  const uint64_t base_seed = opt.run_seed();

  // The reader's (libcommon's ordered loop runs `next` on a thread of its own).
  ca::Json current;
  std::string current_id;
  int left_of_current = 0;
  int64_t next_seq = 0;
  std::atomic<int64_t> read{0}, other_shard{0};
  // The emitter's (the calling thread).
  ca::Counts counts;
  std::map<std::string, int64_t> stops;
  int64_t episode_errors = 0;  // episodes that ended in stop reason `error`
  // A failed write (the reader closed the output, a full disk) is kept, no new episode starts, and
  // it is reported once the running ones have ended.
  std::exception_ptr write_error;
  int write_status = ca::kExitOk;
  std::atomic<bool> output_gone{false};

  auto next = [&](EpisodeItem& item) -> bool {
    for (;;) {
      if (left_of_current == 0) {
        ca::Json rec;
        try {
          if (!reader.next(rec)) return false;
        } catch (const ca::Error&) {  // a line that is not JSON breaks the stream
          throw;
        } catch (const std::exception& e) {
          // The JSON parser's other errors (a number that overflows a double: 1e999) are bad
          // input all the same, named by line.
          throw ca::InputError(reader.where() + ": not JSON: " + e.what());
        }
        ++read;
        if (!opt.shard.contains(ca::record_key(rec))) {
          ++other_shard;
          continue;
        }
        try {
          ca::get_required<std::string>(rec, "/code");
          auto id = ca::get_optional<std::string>(rec, "/task_id");
          current_id = id ? *id : ca::task_id_for(rec);
          if (!id) rec["task_id"] = current_id;
        } catch (const ca::FieldError& e) {
          ca::mark_bad_record(rec, e, "agent-run", reader.where(), opt.strict);  // throws under --strict
          item.bad = true;
          item.out = std::move(rec);
          return true;
        }
        current = rec;
        left_of_current = per_task;
        item.first_of_task = true;
      }
      --left_of_current;
      const int64_t seq = next_seq++;
      item.ep.task = current;
      item.ep.task_id = current_id;
      item.ep.index = seq;
      item.ep.seed = base_seed + static_cast<uint64_t>(seq);
      return true;
    }
  };
  auto work = [&](int lane, EpisodeItem& item) {
    if (item.bad) return;
    agent::EpisodeInput& ep = item.ep;
    ep.sandbox_uid = first_uid + lane;
    try {
      item.out = agent::run_episode(ep, policy, policy_description, s, skill);
    } catch (const std::exception& e) {
      // run_episode keeps what it can; this is for what failed around the loop (the workspace
      // could not be made, the record could not be built).
      const std::string why = agent::valid_text(e.what());
      ca::log::error("task ", ep.task_id, ": episode failed: ", why);
      item.out = ca::Json{{"task_id", ep.task_id},
                            {"task", ep.task},
                            {"episode", {{"episode_index", ep.index}, {"seed", ep.seed}, {"turns", ca::Json::array()},
                                         {"stop_reason", agent::g_interrupted ? "interrupted" : "error"},
                                         {"error", why}}},
                            {"error", {{"tool", "agent-run"}, {"field", "episode"}, {"reason", why}}}};
    }
    const ca::Json& episode = item.out["episode"];
    const std::string stop = episode["stop_reason"].get<std::string>();
    ca::log::info("task ", ep.task_id, " episode ", ep.index, ": ", stop, ", ",
                  episode.contains("counts") ? episode["counts"]["turns"].get<int64_t>() : static_cast<int64_t>(0),
                  " turns");
    // A failed episode is named with its reason (its record is written all the same).
    if (stop == "policy_error" || stop == "error")
      ca::log::warn("task ", ep.task_id, " episode ", ep.index, " failed (", stop, "): ",
                    episode.contains("error") && episode["error"].is_string()
                        ? agent::cut_utf8(episode["error"].get<std::string>(), 500)
                        : std::string("no reason given"));
  };
  // In input order, here: the counts, the store, the output.
  auto emit = [&](EpisodeItem& item) {
    if (item.bad) {
      ++counts.bad;
    } else {
      std::string stop = item.out["episode"]["stop_reason"].get<std::string>();
      ++stops[stop];
      if (stop == "error" || stop == "policy_error") ++counts.failed;
      else ++counts.done;
      if (stop == "error") ++episode_errors;
      progress.tick();
      if (store) {
        try {
          if (item.first_of_task) store->put_task(item.ep.task);
          if (item.out.contains("candidate_id")) store->import_record(item.out);
        } catch (const std::exception& e) {
          ca::log::warn("store: ", e.what());
        }
      }
    }
    if (write_error) return;
    try {
      writer.write(item.out);
    } catch (const ca::Error& e) {
      write_error = std::current_exception();
      write_status = e.exit_code;
      output_gone = true;
    }
  };

  int status = ca::kExitOk;
  std::string fatal;
  ca::OrderedLoopOptions loop;
  loop.lanes = jobs;
  loop.window = 2 * static_cast<int64_t>(jobs);
  loop.stop = [&] { return agent::g_interrupted.load() || output_gone.load(); };
  ca::OrderedLoopEnd end;
  try {
    end = ca::run_ordered<EpisodeItem>(loop, next, work, emit);
  } catch (const ca::Error& e) {  // a bad line (exit 2), or --strict on a bad record
    fatal = e.what();
    status = e.exit_code;
  } catch (const std::exception& e) {
    fatal = std::string("internal error: ") + e.what();
    status = ca::kExitInternal;
  }
  counts.read = read.load();
  counts.other_shard = other_shard.load();
  progress.finish();
  ca::Json by_stop = stops;
  ca::log::info(counts.done + counts.failed, " episodes (", counts.done, " done, ", counts.failed,
                " failed: policy errors or errors), ", counts.bad, " bad records; stop reasons ", by_stop.dump());
  // The exit status, once, and the same in the store: an interrupt is 128 + its signal; else bad
  // input or an internal error as they happened; else a failed write; else episodes that failed.
  int exit_status = status;
  if (exit_status == ca::kExitOk && write_error) exit_status = write_status;
  if (exit_status == ca::kExitOk && episode_errors > 0) exit_status = ca::kExitInternal;
  if (agent::g_interrupted) exit_status = 128 + (agent::g_signal.load() ? agent::g_signal.load() : SIGINT);
  if (store) store->end_run(exit_status, counts.to_json());
  if (!fatal.empty()) ca::log::error(fatal);
  if (agent::g_interrupted) {
    ca::log::warn("interrupted by ", strsignal(agent::g_signal.load() ? agent::g_signal.load() : SIGINT),
                  ": every finished episode and those in progress (as interrupted) were written");
    if (end.reader_blocked) {
      // The reader is still blocked on the input and uses this frame: end here, the store closed
      // and the output flushed, before the frame goes.
      store.reset();
      std::cout.flush();
      std::cerr.flush();
      std::_Exit(exit_status);
    }
    return exit_status;
  }
  if (write_error && status == ca::kExitOk) std::rethrow_exception(write_error);
  if (episode_errors > 0 && status == ca::kExitOk)
    ca::log::error(episode_errors, " episode(s) failed (stop reason error); their records, with the "
                                   "trajectory so far and the reason, were written");
  return exit_status;
}

}  // namespace ca::agent
