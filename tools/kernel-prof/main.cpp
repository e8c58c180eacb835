// kernel-prof: time candidates that passed kernel-check, and their task's eager and torch.compile
// baselines, with one method (DESIGN.md §6); adds the `prof` section.
#include <poll.h>
#include <unistd.h>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/service.hpp"
#include "libcommon/store.hpp"
#include "tools/kernel-prof/multi_gpu.hpp"
#include "tools/kernel-prof/options.hpp"
#include "tools/kernel-prof/profiler.hpp"
#include "tools/kernel-prof/replay.hpp"

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

int main(int argc, char** argv) {
  ca::Cli cli("kernel-prof",
              "Time candidates whose check passed against their task's eager and torch.compile baselines: L2 "
              "flushed before every call, CUDA-graph replays between CUDA events, CUPTI kernel times, input sets "
              "rotated, until the median's 95% CI is within 1%; outputs of timed calls checked again. Records "
              "whose check failed (or that have none) pass through untouched.",
              "kernel-check --tasks tasks.jsonl < cands.jsonl | kernel-prof --tasks tasks.jsonl --gpus 0,1 "
              "--baselines eager,compile --metric device > profiled.jsonl",
              "kernel-check(1), reward-calc(1), run-store(1), ncu(1)");
  cli.add_stream_options();
  ca::prof::ProfOptions opt;
  opt.register_with(cli.app());
  ca::ServiceOptions service;
  service.register_with(cli.app());
  auto& common = cli.options();
  return cli.run(argc, argv, [&]() -> int {
    opt.validate();
    opt.seed_given = common.seed.has_value();
    opt.seed = common.seed ? *common.seed : ca::unpredictable_seed();
    if (!opt.replay_once.empty()) return ca::prof::replay_once(opt.replay_once, opt.gpus.front());
    service.validate(common);
    if (service.enabled() && opt.gpus.size() > 1)
      throw ca::UsageError("--serve times on one GPU: start one service per GPU (--gpus N each)");
    if (opt.gpus.size() > 1) return ca::prof::run_on_gpus(opt, common, argc, argv);
    auto store = ca::open_store_for(common);
    ca::prof::Profiler profiler(opt, common, store.get());

    if (service.enabled()) {
      // The GPU, its worker and torch now, not at the first request; without them a service still
      // passes failed checks through, and a passing one gets a 503 naming what is missing.
      try {
        profiler.warm_up();
      } catch (const ca::EnvironmentError& e) {
        ca::log::warn(e.what(), ": serving anyway (records whose check passed will be refused)");
      }
      std::mutex mu;  // one GPU, one timing job at a time: concurrent requests queue here
      ca::Counts totals;
      ca::ServiceSpec spec;
      spec.tool = "kernel-prof";
      spec.endpoint = "/v1/profile";
      if (ca::Json g = profiler.gpu_json(); !g.is_null()) spec.gpus.push_back(g);
      spec.judge = [&](std::vector<ca::Line>& lines) {
        std::lock_guard<std::mutex> lock(mu);
        ca::RecordLoop loop(common);
        struct Tally {
          ca::Counts& totals;
          ca::RecordLoop& loop;
          ~Tally() { totals += loop.counts(); }
        } tally{totals, loop};
        std::vector<ca::Record> out;
        for (auto& line : lines)
          if (loop.handle(line.record, line.where, [&](ca::Record& r) { return profiler.profile(r); }))
            out.push_back(std::move(line.record));
        return out;
      };
      int status = ca::run_service(service, spec);
      ca::log::info(totals.text());
      if (store) store->end_run(status, totals.to_json());
      return status;
    }
    // In a pipe whose first record is not there yet, the GPU, the reference worker and their
    // one-time costs are paid while kernel-check is still checking it.
    if (input_pending(common.input)) {
      try {
        profiler.warm_up();
      } catch (const ca::EnvironmentError& e) {
        // No GPU or no torch: a record that needs timing says so, with the exit code; one that
        // does not passes through as before.
        ca::log::verbose("no GPU session before the first record: ", e.what());
      }
    }
    ca::RecordLoop loop(common);
    int status = ca::kExitOk;
    try {
      status = loop.run([&](ca::Record& record) { return profiler.profile(record); });
    } catch (const ca::Error& e) {
      ca::report_error(e);
      ca::log::info(loop.counts().text());
      status = e.exit_code;
    }
    if (store) store->end_run(status, loop.counts().to_json());
    return status;
  });
}
