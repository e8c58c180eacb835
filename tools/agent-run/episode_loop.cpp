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
#include "libcommon/record_path.hpp"
#include "tools/agent-run/episode.hpp"
#include "tools/agent-run/text.hpp"

namespace ca::agent_run {

namespace {
// Only atomics here.
void on_signal(int sig) {
int none = 0;
agent_run::g_signal.compare_exchange_strong(none, sig);
agent_run::g_interrupted = true;
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

// One episode on its way through the record path: its task record comes in, its candidate record
// goes out. A bad task record goes through as it came, with its error section.
struct EpisodeItem : ca::RecordItem {
  agent_run::EpisodeInput ep;
};

// What a run adds to the record path's counts, on the emitting thread: stop reasons, episodes that
// ended in `error`, and a failed write (the reader closed the output, a full disk), which is kept:
// no new episode starts, and it is reported once the running ones have ended.
struct EpisodeRun {
  std::map<std::string, int64_t> stops;
  int64_t episode_errors = 0;
  std::exception_ptr write_error;
  int write_status = ca::kExitOk;
  std::atomic<bool> output_gone{false};
  std::string fatal;  // what ended the run early (a bad line, --strict, an internal error)
  int64_t next_seq = 0;  // the reader thread's: the next episode's index
};

// The record of an episode that failed around the loop (the workspace could not be made, the record
// could not be built); run_episode keeps what it can itself.
ca::Json failed_episode(const agent_run::EpisodeInput& ep, const std::string& why) {
  ca::log::error("task ", ep.task_id, ": episode failed: ", why);
  return ca::Json{{"task_id", ep.task_id},
                  {"task", ep.task},
                  {"episode", {{"episode_index", ep.index}, {"seed", ep.seed}, {"turns", ca::Json::array()},
                               {"stop_reason", agent_run::g_interrupted ? "interrupted" : "error"},
                               {"error", why}}},
                  {"error", {{"tool", "agent-run"}, {"field", "episode"}, {"reason", why}}}};
}

void log_episode(const agent_run::EpisodeInput& ep, const ca::Json& out) {
  const ca::Json& episode = out["episode"];
  const std::string stop = episode["stop_reason"].get<std::string>();
  ca::log::info("task ", ep.task_id, " episode ", ep.index, ": ", stop, ", ",
                episode.contains("counts") ? episode["counts"]["turns"].get<int64_t>() : static_cast<int64_t>(0),
                " turns");
  // A failed episode is named with its reason (its record is written all the same).
  if (stop == "policy_error" || stop == "error")
    ca::log::warn("task ", ep.task_id, " episode ", ep.index, " failed (", stop, "): ",
                  episode.contains("error") && episode["error"].is_string()
                      ? agent_run::cut_utf8(episode["error"].get<std::string>(), 500)
                      : std::string("no reason given"));
}

// The run's end: the exit status, once, and the same in the store: an interrupt is 128 + its
// signal; else bad input or an internal error as they happened; else a failed write; else
// episodes that failed.
int end_episodes(ca::RecordPath& path, EpisodeRun& run, int status) {
  int exit_status = status;
  if (exit_status == ca::kExitOk && run.write_error) exit_status = run.write_status;
  if (exit_status == ca::kExitOk && run.episode_errors > 0) exit_status = ca::kExitInternal;
  const int sig = agent_run::g_signal.load() ? agent_run::g_signal.load() : SIGINT;
  if (agent_run::g_interrupted) exit_status = 128 + sig;
  path.end(exit_status, "; stop reasons " + ca::Json(run.stops).dump());
  if (!run.fatal.empty()) ca::log::error(run.fatal);
  if (agent_run::g_interrupted) {
    ca::log::warn("interrupted by ", strsignal(sig),
                  ": every finished episode and those in progress (as interrupted) were written");
    return exit_status;
  }
  if (run.write_error && status == ca::kExitOk) std::rethrow_exception(run.write_error);
  if (run.episode_errors > 0 && status == ca::kExitOk)
    ca::log::error(run.episode_errors, " episode(s) failed (stop reason error); their records, with the "
                                       "trajectory so far and the reason, were written");
  return exit_status;
}

// What the record path does with each of a task's episodes: admitted in input order (its index
// and seed), run on a lane (its own sandbox uid), and in input order tallied and stored.
ca::RecordJob<EpisodeItem> episode_job(const Options& o, Policy& policy, uint64_t base_seed, Store* store,
                                       EpisodeRun& run, ca::log::Progress& progress) {
  const Json policy_description = policy.describe();
  ca::RecordJob<EpisodeItem> job;
  job.admit = [&run, base_seed](EpisodeItem& item) {  // each of the task's episodes, in input order
    ca::Json& rec = item.record;
    ca::get_required<std::string>(rec, "/code");
    if (!ca::get_optional<std::string>(rec, "/task_id")) rec["task_id"] = ca::task_id_for(rec);
    const int64_t seq = run.next_seq++;
    item.ep.task = rec;
    item.ep.task_id = rec["task_id"].get<std::string>();
    item.ep.index = seq;
    item.ep.seed = base_seed + static_cast<uint64_t>(seq);
  };
  job.work = [&o, &policy, policy_description](int lane, EpisodeItem& item) {
    agent_run::EpisodeInput& ep = item.ep;
    ep.sandbox_uid = o.first_uid + lane;
    try {
      item.record = agent_run::run_episode(ep, policy, policy_description, o.s, o.skill);
    } catch (const std::exception& e) {
      item.record = failed_episode(ep, agent_run::valid_text(e.what()));
    }
    log_episode(ep, item.record);
    const std::string stop = item.record["episode"]["stop_reason"].get<std::string>();
    return stop == "error" || stop == "policy_error" ? ca::Outcome::failed : ca::Outcome::done;
  };
  job.emit = [&run, &progress, store](EpisodeItem& item) {  // in input order: the tallies and the store
    const std::string stop = item.record["episode"]["stop_reason"].get<std::string>();
    ++run.stops[stop];
    if (stop == "error") ++run.episode_errors;
    progress.tick();
    if (!store) return;
    try {
      if (item.copy == 0) store->put_task(item.ep.task);
      if (item.record.contains("candidate_id")) store->import_record(item.record);
    } catch (const std::exception& e) {
      ca::log::warn("store: ", e.what());
    }
  };
  return job;
}

}  // namespace

int run_episodes(Options& o, const CommonOptions& opt, Policy& policy, std::unique_ptr<Store>& store) {
  const std::string input = o.tasks_file.empty() ? opt.input : o.tasks_file;
  ca::RecordReader reader(input);
  ca::RecordWriter writer(opt.output);
  ca::log::Progress progress("episodes");  // on a terminal: done/total, rate, time left
  if (progress.enabled())
    if (int64_t n = ca::count_lines(input); n > 0) progress.set_total(n * o.per_task);
  const uint64_t base_seed = opt.run_seed();
  EpisodeRun run;

  ca::RecordPath* path_ref = nullptr;
  ca::RecordPathOptions path_options;  // the store gets the tasks and episodes here, and the run's end
  path_options.lanes = o.jobs;
  path_options.copies = o.per_task;
  path_options.store = store.get();
  path_options.stop = [&] { return agent_run::g_interrupted.load() || run.output_gone.load(); };
  path_options.reader_blocked = [&] {
    // The reader is still blocked on the input and uses this frame: end here, the store closed and
    // the output flushed, before the frame goes.
    int code;
    try {
      code = end_episodes(*path_ref, run, ca::kExitOk);
    } catch (const ca::Error& e) {
      ca::report_error(e);
      code = e.exit_code;
    }
    store.reset();
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(code);
  };
  ca::RecordPath path(opt, path_options);
  path_ref = &path;

  ca::RecordJob<EpisodeItem> job = episode_job(o, policy, base_seed, store.get(), run, progress);
  auto write = [&](const ca::Json& record) {
    if (run.write_error) return;
    try {
      writer.write(record);
    } catch (const ca::Error& e) {
      run.write_error = std::current_exception();
      run.write_status = e.exit_code;
      run.output_gone = true;
    }
  };
  int status = ca::kExitOk;
  try {
    path.run<EpisodeItem>(
        ca::reader_source(reader),
        job, write, true);
  } catch (const ca::Error& e) {  // a bad line (exit 2), or --strict on a bad record
    run.fatal = e.what();
    status = e.exit_code;
  } catch (const std::exception& e) {
    run.fatal = std::string("internal error: ") + e.what();
    status = ca::kExitInternal;
  }
  progress.finish();
  return end_episodes(path, run, status);
}

}  // namespace ca::agent_run
