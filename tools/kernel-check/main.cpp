// kernel-check: compile, run and judge candidate kernel bundles against their task's reference.
// As a stream (stdin to stdout) or, with --serve, as a long-lived service (SERVICE.md).
#include <CLI/CLI.hpp>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/service.hpp"
#include "tools/kernel-check/checker.hpp"
#include "tools/kernel-check/options.hpp"
#include "tools/kernel-check/runner.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("kernel-check", "Compile, run and judge candidate kernel bundles against their task's reference.",
              "agent-run --tasks tasks.jsonl ... | kernel-check --tasks tasks.jsonl --gpus 0,1 | kernel-prof",
              "kernel-prof(1), agent-run(1), run-store(1), cuda-agent(7)");
  cli.add_stream_options();
  ca::kernel_check::CheckOptions opt;
  auto& app = cli.app();
  app.add_flag("--compile-only", opt.compile_only, "Compile and check the plan and the rules; no GPU needed");
  app.add_option("--arch", opt.arch, "Target architecture sm_XX (default: the GPU's; sm_90 without one)");
  app.add_option("--rules,--policy", opt.rules_path, "Bundle rules YAML (default: the shipped datasets/skill/rules.yaml)");
  app.add_option("--tasks", opt.tasks_path, "Task records (JSONL) for candidates that carry only a task_id");
  app.add_option("--cache-dir", opt.cache_dir, "Cubin cache (default $CUDA_AGENT_CACHE/cubin or ~/.cache/cuda-agent/cubin)");
  app.add_flag("--no-cache", opt.no_cache, "Neither read nor write the cubin cache");
  app.add_option("--tolerance", opt.tolerance,
                 "calibrated (default: the relative error norm must be within K x the claimed precision's own error on "
                 "the task, measured against float64 on every trial's inputs, plus a floor; and within atol = rtol = "
                 "1e-2 elementwise), published (atol = rtol = 1e-2 and a 5e-2 norm, as the paper) or strict (1e-4 for "
                 "fp32, as KernelBench now)")
      ->check(CLI::IsMember({"calibrated", "published", "default", "strict"}));
  app.add_flag("--allow-stochastic", opt.allow_stochastic,
               "Judge candidates of a task whose reference is stochastic (live dropout) against one random draw; by "
               "default they get status task_stochastic, not a verdict on the candidate");
  app.add_option("--atol", opt.atol, "Absolute tolerance (overrides --tolerance)");
  app.add_option("--rtol", opt.rtol, "Relative tolerance (overrides --tolerance)");
  app.add_option("--trials", opt.trials, "Trials on fresh inputs after the warm call (at least 5)")->check(CLI::Range(5, 1000));
  app.add_option("--gpus", opt.gpus, "GPUs to use, e.g. 0,1 (default: all visible)");
  app.add_option("--worker-memory", opt.worker_memory_mb, "Memory in MiB all reference workers together may hold (one per GPU; each gets its share: resident sets of its processes and the files it writes); 0: three quarters of this host's, at most 16 GiB each")->capture_default_str();
  app.add_option("--timeout", opt.timeout_s, "Watchdog per call in seconds (default: 50x the task's eager time, at least 2 s)");
  app.add_option("-j,--jobs", opt.jobs, "Compile threads")->check(CLI::Range(1, 256));
  app.add_flag("--graph,!--no-graph", opt.graph,
               "Run every forward call as a CUDA graph replay, the way kernel-prof times it (the default: a kernel "
               "cannot tell checking from timing by its launch mode); --no-graph launches the steps one by one");
  app.add_flag("--runner", opt.runner, "Internal: be the per-GPU child (JSON Lines on stdin/stdout)")->group("");
  app.add_option("--gpu", opt.runner_gpu, "Internal: the runner's GPU")->group("");

  app.add_option("--lock-timeout-s", opt.lock_timeout_s,
                 "Wait at most this long for a GPU kernel-prof is timing on (the node's per-GPU lock, taken shared)");
  ca::ServiceOptions service;
  service.register_with(app);

  return cli.run(argc, argv, [&]() -> int {
    auto& common = cli.options();
    if (opt.runner) return ca::kernel_check::runner_main(opt.runner_gpu);
    if (opt.tolerance == "default") opt.tolerance = "published";  // its name before calibration
    service.validate(common);
    // Tasks that clients send share no interpreter: one client's task that patches torch would
    // change every later task's reference in a shared worker.
    opt.one_task_per_worker = service.client_tasks() == ca::ClientTasks::verified;
    ca::kernel_check::Checker checker(opt, common);

    if (service.enabled()) {
      checker.serve(service.client_tasks());
      ca::ServiceSpec spec;
      spec.tool = "kernel-check";
      spec.endpoint = "/v1/check";
      spec.gpus = checker.gpus_json();
      // Requests at once: enough to keep every compile thread and GPU lane busy; the compilers
      // themselves are bounded by -j inside the checker, whatever the requests.
      spec.max_running = opt.jobs + static_cast<int>(spec.gpus.size()) + 1;
      // Without a GPU (and not --compile-only) nothing can be judged: health says so (503), and so
      // does every request, so a client's pool sends its work elsewhere.
      spec.unavailable = [&] { return checker.unavailable(); };
      spec.judge = [&](std::vector<ca::Line>& lines, const std::function<bool()>& cancelled) {
        if (std::string why = checker.unavailable(); !why.empty())
          throw ca::EnvironmentError("this kernel-check service cannot judge: " + why);  // 503, never no_device verdicts
        std::vector<ca::Json> out;
        // A client that left: no more of its records.
        checker.check(ca::lines_source(lines, cancelled), [&](const ca::Json& r) { out.push_back(r); });
        return out;
      };
      int code = ca::run_service(service, spec);
      return checker.summary(code);
    }

    return checker.stream();
  });
}
