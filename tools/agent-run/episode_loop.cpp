// agent-run's episodes on -j threads.
#include "tools/agent-run/episode_loop.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
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

int run_episodes(Options& o, const CommonOptions& opt, Policy& policy, std::unique_ptr<Store>& store) {
  auto& [tasks_file, policy_spec, jobs, per_task, first_uid, s, po, extra_text, workspace_dir, no_logprobs, skill] = o;
  const Json policy_description = policy.describe();
  ca::RecordReader reader(tasks_file.empty() ? opt.input : tasks_file);
  ca::RecordWriter writer(opt.output);
  ca::log::Progress progress("episodes");  // on a terminal: done/total, rate, time left
  if (progress.enabled())
    if (int64_t n = ca::count_lines(tasks_file.empty() ? opt.input : tasks_file); n > 0) progress.set_total(n * per_task);
  const uint64_t base_seed = opt.seed ? *opt.seed : std::random_device{}() * 0x100000000ull + std::random_device{}();
  if (!opt.seed) ca::log::verbose("seed ", base_seed);


  std::mutex in_mutex, out_mutex;
  ca::Record current;
  std::string current_id;
  int left_of_current = 0;
  int64_t next_seq = 0, next_to_write = 0;
  bool input_done = false;
  std::map<int64_t, ca::Record> finished;
  ca::Counts counts;
  std::map<std::string, int64_t> stops;
  int status = ca::kExitOk;
  std::string fatal;

  // A failed write (the reader closed the output, a full disk) must not escape a worker thread:
  // it is kept, no new episode starts, and it is reported once the workers have stopped.
  std::exception_ptr write_error;  // guarded by out_mutex
  int write_status = ca::kExitOk;
  std::atomic<bool> output_gone{false};
  auto write_ready = [&](bool all) {  // out_mutex held
    if (write_error) return;
    try {
      while (!finished.empty() && (all || finished.begin()->first == next_to_write)) {
        writer.write(finished.begin()->second);
        finished.erase(finished.begin());
        ++next_to_write;
      }
    } catch (const ca::Error& e) {
      write_error = std::current_exception();
      write_status = e.exit_code;
      output_gone = true;
    }
  };
  auto emit = [&](int64_t seq, ca::Record rec) {
    std::lock_guard<std::mutex> lock(out_mutex);
    finished.emplace(seq, std::move(rec));
    write_ready(false);
  };

  // Worker accounting, so an interrupt never waits on a thread blocked reading a slow input:
  // `reading` counts workers in (or waiting for) the input section, `exited` those that returned.
  std::atomic<int> reading{0}, exited{0};
  int64_t episode_errors = 0;  // episodes that ended in stop reason `error` (out_mutex)
  auto worker_loop = [&](int slot) {
    for (;;) {
      agent::EpisodeInput ep;
      int64_t seq;
      {
        struct Reading {
          std::atomic<int>& n;
          explicit Reading(std::atomic<int>& c) : n(c) { ++n; }
          ~Reading() { --n; }
        } in_input(reading);
        std::lock_guard<std::mutex> lock(in_mutex);
        if (agent::g_interrupted || input_done || output_gone) return;
        if (left_of_current == 0) {
          ca::Record rec;
          try {
            if (!reader.next(rec)) {
              input_done = true;
              return;
            }
          } catch (const ca::Error& e) {  // a line that is not JSON breaks the stream
            fatal = e.what();
            status = e.exit_code;
            input_done = true;
            return;
          } catch (const std::exception& e) {
            // The JSON parser's other errors (a number that overflows a double: 1e999) are bad
            // input all the same, named by line.
            fatal = reader.where() + ": not JSON: " + e.what();
            status = ca::kExitBadInput;
            input_done = true;
            return;
          }
          if (agent::g_interrupted) return;  // read while the signal came: not started
          ++counts.read;
          try {
            if (!opt.shard.contains(ca::record_key(rec))) {
              ++counts.other_shard;
              continue;
            }
            ca::get_required<std::string>(rec, "/code");
            auto id = ca::get_optional<std::string>(rec, "/task_id");
            current_id = id ? *id : ca::task_id_for(rec);
            if (!id) rec["task_id"] = current_id;
          } catch (const ca::FieldError& e) {
            try {
              ca::mark_bad_record(rec, e, "agent-run", reader.where(), opt.strict);
            } catch (const ca::Error& fe) {
              fatal = fe.what();
              status = fe.exit_code;
              input_done = true;
              return;
            }
            ++counts.bad;
            emit(next_seq++, rec);
            continue;
          }
          current = rec;
          left_of_current = per_task;
          if (store) {
            std::lock_guard<std::mutex> olock(out_mutex);
            store->put_task(current);
          }
        }
        --left_of_current;
        seq = next_seq++;
        ep.task = current;
        ep.task_id = current_id;
        ep.index = seq;
        ep.seed = base_seed + static_cast<uint64_t>(seq);
        ep.sandbox_uid = first_uid + slot;
      }
      ca::Record out;
      try {
        out = agent::run_episode(ep, policy, policy_description, s, skill);
      } catch (const std::exception& e) {
        // run_episode keeps what it can; this is for what failed around the loop (the workspace
        // could not be made, the record could not be built).
        const std::string why = agent::valid_text(e.what());
        ca::log::error("task ", ep.task_id, ": episode failed: ", why);
        out = ca::Record{{"task_id", ep.task_id},
                         {"task", ep.task},
                         {"episode", {{"episode_index", ep.index}, {"seed", ep.seed}, {"turns", ca::Json::array()},
                                      {"stop_reason", agent::g_interrupted ? "interrupted" : "error"},
                                      {"error", why}}},
                         {"error", {{"tool", "agent-run"}, {"field", "episode"}, {"reason", why}}}};
      }
      std::string stop = out["episode"]["stop_reason"].get<std::string>();
      ca::log::info("task ", ep.task_id, " episode ", ep.index, ": ", stop, ", ",
                    out["episode"].contains("counts") ? out["episode"]["counts"]["turns"].get<int64_t>()
                                                      : static_cast<int64_t>(0),
                    " turns");
      {
        std::lock_guard<std::mutex> lock(out_mutex);
        ++stops[stop];
        if (stop == "error" || stop == "policy_error") ++counts.failed;
        else ++counts.done;
        if (stop == "error") ++episode_errors;
        progress.tick();
        if (store && out.contains("candidate_id")) {
          try {
            store->import_record(out);
          } catch (const std::exception& e) {
            ca::log::warn("store: ", e.what());
          }
        }
      }
      emit(ep.index, std::move(out));
    }
  };
  auto worker = [&](int slot) {
    try {
      worker_loop(slot);
    } catch (const std::exception& e) {  // never out of a thread (that would abort the process)
      std::lock_guard<std::mutex> lock(out_mutex);
      if (fatal.empty()) fatal = std::string("internal error: ") + e.what();
      if (status == ca::kExitOk) status = ca::kExitInternal;
      output_gone = true;
    }
    ++exited;
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < jobs; ++i) threads.emplace_back(worker, i);
  // After an interrupt, the workers still inside the input section are blocked on a read (the
  // others returned): they are let go, the rest is written and the run closed.
  while (exited.load() < jobs) {
    if (agent::g_interrupted && exited.load() + reading.load() >= jobs) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool all_exited = exited.load() >= jobs;
  for (auto& t : threads) {
    if (all_exited) t.join();
    else t.detach();
  }
  std::unique_lock<std::mutex> final_lock(out_mutex);
  progress.finish();
  // After an interrupt every finished episode is written, even past a gap in the order.
  write_ready(true);
  finished.clear();
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
    if (!all_exited) {
      // A worker is still blocked reading the input and uses this frame: end here, the store
      // closed and the output flushed, before the frame goes.
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
