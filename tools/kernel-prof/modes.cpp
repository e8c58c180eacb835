// kernel-prof's stream and service modes (modes.hpp).
#include "tools/kernel-prof/modes.hpp"

#include <poll.h>
#include <unistd.h>

#include <mutex>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/task_lookup.hpp"

namespace ca::kernel_prof {

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
  RecordPathOptions path_options;
  path_options.store = store;
  path_options.section = "prof";
  RecordPath path(common, path_options);
  RecordJob<RecordItem> job;
  job.work = [&](int, RecordItem& item) {
    // --resume reuses a stored profile by candidate_id: only when the id is the hash of the bundle.
    if (common.resume) verify_candidate_id(item.record);
    return profiler.profile(item.record);
  };
  return path.end(path.stream(job));
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
  RecordPathOptions path_options;  // every request's records through one path: its totals, the run's end
  path_options.store = store;
  path_options.section = "prof";
  RecordPath path(common, path_options);
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
    RecordJob<RecordItem> job;
    job.work = [&](int, RecordItem& item) {
      Json& r = item.record;
      // A record that will be timed (its check passed, a GPU is there): a client's task runs only
      // with --accept-tasks and under its content id, and its candidate_id, which the profile is
      // stored and reused under, must be the hash of its bundle. Others pass through untouched
      // (nothing run, nothing stored), or get the 503 of a missing GPU.
      if (no_gpu.empty() && check_passed(r)) {
        screen_client_task(r, get_required<std::string>(r, "/task_id"), client_tasks);
        verify_candidate_id(r);
      }
      return profiler.profile(r);
    };
    std::vector<Json> out;
    // The client left: the rest of its records are not timed.
    path.run<RecordItem>(lines_source(lines, cancelled), job, [&](const Json& record) { out.push_back(record); });
    return out;
  };
  return path.end(run_service(service, spec));
}
}  // namespace ca::kernel_prof
