// kernel-prof's stream and service modes (modes.hpp).
#include "tools/kernel-prof/modes.hpp"

#include <poll.h>
#include <unistd.h>

#include <mutex>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_loop.hpp"

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
    status = loop.run([&](Json& record) { return profiler.profile(record); });
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
  try {
    profiler.warm_up();
  } catch (const EnvironmentError& e) {
    log::warn(e.what(), ": serving anyway (records whose check passed will be refused)");
  }
  std::mutex mu;  // one GPU, one timing job at a time: concurrent requests queue here
  Counts totals;
  ServiceSpec spec;
  spec.tool = "kernel-prof";
  spec.endpoint = "/v1/profile";
  if (Json g = profiler.gpu_json(); !g.is_null()) spec.gpus.push_back(g);
  spec.judge = [&](std::vector<Line>& lines) {
    std::lock_guard<std::mutex> lock(mu);
    RecordLoop loop(common);
    loop.store_into(store, "prof");
    struct Tally {  // counted also when a record's error ends the request
      Counts& totals;
      RecordLoop& loop;
      ~Tally() { totals += loop.counts(); }
    } tally{totals, loop};
    std::vector<Json> out;
    for (auto& line : lines)
      if (loop.handle(line.record, line.where, [&](Json& r) { return profiler.profile(r); }))
        out.push_back(std::move(line.record));
    return out;
  };
  int status = run_service(service, spec);
  log::info(totals.text());
  if (store) store->end_run(status, totals.to_json());
  return status;
}

}  // namespace ca::prof
