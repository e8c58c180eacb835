// kernel-prof: time candidates that passed kernel-check, and their task's eager and torch.compile
// baselines, with one method (DESIGN.md §6); adds the `prof` section.
#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/service.hpp"
#include "libcommon/store.hpp"
#include "tools/kernel-prof/modes.hpp"
#include "tools/kernel-prof/multi_gpu.hpp"
#include "tools/kernel-prof/options.hpp"
#include "tools/kernel-prof/profiler.hpp"
#include "tools/kernel-prof/replay.hpp"

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
  ca::kernel_prof::ProfOptions opt;
  opt.register_with(cli.app());
  ca::ServiceOptions service;
  service.register_with(cli.app());
  auto& common = cli.options();
  return cli.run(argc, argv, [&]() -> int {
    opt.validate_and_load();
    opt.seed_given = common.seed.has_value();
    opt.seed = common.run_seed();
    if (!opt.replay_once.empty()) return ca::kernel_prof::replay_once(opt.replay_once, opt.gpus.front());
    service.validate(common);
    // Tasks that clients send share no interpreter (one that patches torch would change the others').
    opt.one_task_per_worker = service.client_tasks() == ca::ClientTasks::verified;
    if (service.enabled() && opt.gpus.size() > 1)
      throw ca::UsageError("--serve times on one GPU: start one service per GPU (--gpus N each)");
    if (opt.gpus.size() > 1) return ca::kernel_prof::run_on_gpus(opt, common, argc, argv);
    auto store = ca::open_store_for(common);
    ca::kernel_prof::Profiler profiler(opt, common, store.get());
    profiler.set_child_after_context_loss(!service.enabled());
    return service.enabled() ? ca::kernel_prof::serve(profiler, service, common, store.get())
                             : ca::kernel_prof::stream(profiler, common, store.get());
  });
}
