// kernel-prof's stream and service modes (modes.hpp).
#include "tools/kernel-prof/modes.hpp"

#include <poll.h>
#include <unistd.h>

#include <mutex>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/task_lookup.hpp"

namespace ca::prof {

namespace {

// Whether the input is stdin and nothing comes within a quarter second: a pipe whose writer is
// still working on its first record (kernel-check checking it), not a record handed over at once
// (agent-run's locked profile call, a file).
bool input_pending(const std::string& path) {
  if (path != "-") return false;
  pollfd p{STDIN_FILENO, POLLIN, 0};
  return ::poll(&p, 1, 250) == 0;
}

}  // namespace

int stream(Profiler& profiler, const CommonOptions& common, Store* store) {
  if (input_pending(common.input)) {
    try {
      profiler.warm_up();
    } catch (const EnvironmentError& e) {
      // No GPU or no torch: a record that needs timing says so, with the exit code; one that does
      // not passes through as before.
      log::verbose("no GPU session before the first record: ", e.what());
    }
  }
  RecordLoop loop(common);
  loop.store_into(store, "prof");
  int status = kExitOk;
  try {
    status = loop.run([&](Json& record) {
      // --resume reuses a stored profile by candidate_id: only when the id is the hash of the bundle.
      if (common.resume) verify_candidate_id(record);
      return profiler.profile(record);
    });
  } catch (const Error& e) {
    report_error(e);
    log::info(loop.counts().text());
    status = e.exit_code;
  }
  if (store) store->end_run(status, loop.counts().to_json());
  return status;
}

int serve(Profiler& profiler, const ServiceOptions& service, const CommonOptions& common, Store* store) {
  // The GPU, its worker and their one-time costs now, not at the first request; without them a
  // service still passes failed checks through, and a passing one gets a 503 naming what is missing.
  std::string no_gpu;
  try {
    profiler.warm_up();
  } catch (const EnvironmentError& e) {
    no_gpu = e.what();
    log::warn(no_gpu, ": serving anyway (records whose check passed will be refused; health answers 503)");
  }
  std::mutex mu;  // one GPU, one timing job at a time: concurrent requests queue here
  Counts totals;
  ServiceSpec spec;
  spec.tool = "kernel-prof";
  spec.endpoint = "/v1/profile";
  if (Json g = profiler.gpu_json(); !g.is_null()) spec.gpus.push_back(g);
  // One GPU, one timing job: one request runs, the others wait in the server's queue (where a
  // client that leaves drops its request) rather than on the lock.
  spec.max_running = 1;
  spec.unavailable = [&]() -> std::string { return no_gpu.empty() ? "" : "no GPU: " + no_gpu; };
  const ClientTasks client_tasks = service.client_tasks();
  spec.judge = [&](std::vector<Line>& lines, const std::function<bool()>& cancelled) {
    std::lock_guard<std::mutex> lock(mu);
    RecordLoop loop(common);
    loop.store_into(store, "prof");
    struct Tally {  // counted also when a record's error ends the request
      Counts& totals;
      RecordLoop& loop;
      ~Tally() { totals += loop.counts(); }
    } tally{totals, loop};
    std::vector<Json> out;
    for (auto& line : lines) {
      if (cancelled()) break;  // the client left: the rest of its records are not timed
      auto screened = [&](Json& r) {
        // A record that will be timed (its check passed, a GPU is there): a client's task runs
        // only with --accept-tasks and under its content id, and its candidate_id, which the
        // profile is stored and reused under, must be the hash of its bundle. Others pass
        // through untouched (nothing run, nothing stored), or get the 503 of a missing GPU.
        if (no_gpu.empty() && check_passed(r)) {
          screen_client_task(r, get_required<std::string>(r, "/task_id"), client_tasks);
          verify_candidate_id(r);
        }
        return profiler.profile(r);
      };
      if (loop.handle(line.record, line.where, screened)) out.push_back(std::move(line.record));
    }
    return out;
  };
  int status = run_service(service, spec);
  log::info(totals.text());
  if (store) store->end_run(status, totals.to_json());
  return status;
}

}  // namespace ca::prof
