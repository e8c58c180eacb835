// kernel-check: compile, run and judge candidate kernel bundles against their task's reference.
#include <algorithm>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <regex>

#include "libcommon/cli.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"
#include "tools/kernel-check/gpu_judge.hpp"
#include "tools/kernel-check/options.hpp"
#include "tools/kernel-check/policy.hpp"
#include "tools/kernel-check/prepare.hpp"
#include "tools/kernel-check/runner.hpp"

namespace {

// task_id -> task record, from --tasks FILE.
std::map<std::string, ca::Json> read_tasks(const std::string& path) {
  std::map<std::string, ca::Json> tasks;
  if (path.empty()) return tasks;
  ca::RecordReader reader(path);
  ca::Record r;
  while (reader.next(r)) {
    std::string id = r.contains("task_id") && r["task_id"].is_string() ? r["task_id"].get<std::string>() : ca::task_id_for(r);
    tasks[id] = ca::Json::parse(r.dump());
  }
  return tasks;
}

}  // namespace

int main(int argc, char** argv) {
  ca::Cli cli("kernel-check", "Compile, run and judge candidate kernel bundles against their task's reference.",
              "agent-run --tasks tasks.jsonl ... | kernel-check --tasks tasks.jsonl --gpus 0,1 | kernel-prof",
              "kernel-prof(1), agent-run(1), run-store(1), cuda-agent(7)");
  cli.add_stream_options();
  kc::CheckOptions opt;
  auto& app = cli.app();
  app.add_flag("--compile-only", opt.compile_only, "Compile and check the plan and policy; no GPU needed");
  app.add_option("--arch", opt.arch, "Target architecture sm_XX (default: the GPU's; sm_90 without one)");
  app.add_option("--policy", opt.policy_path, "Policy YAML (default: the shipped datasets/skill/policy.yaml)");
  app.add_option("--tasks", opt.tasks_path, "Task records (JSONL) for candidates that carry only a task_id");
  app.add_option("--cache-dir", opt.cache_dir, "Cubin cache (default $CUDA_AGENT_CACHE/cubin or ~/.cache/cuda-agent/cubin)");
  app.add_flag("--no-cache", opt.no_cache, "Neither read nor write the cubin cache");
  app.add_option("--tolerance", opt.tolerance, "default (atol=rtol=1e-2) or strict (1e-4 for fp32, as KernelBench now)")
      ->check(CLI::IsMember({"default", "strict"}));
  app.add_option("--atol", opt.atol, "Absolute tolerance (overrides --tolerance)");
  app.add_option("--rtol", opt.rtol, "Relative tolerance (overrides --tolerance)");
  app.add_option("--trials", opt.trials, "Trials on fresh inputs after the warm call (at least 5)")->check(CLI::Range(5, 1000));
  app.add_option("--gpus", opt.gpus, "GPUs to use, e.g. 0,1 (default: all visible)");
  app.add_option("--timeout", opt.timeout_s, "Watchdog per call in seconds (default: 50x the task's eager time, at least 2 s)");
  app.add_option("-j,--jobs", opt.jobs, "Compile threads")->check(CLI::Range(1, 256));
  app.add_flag("--graph,!--no-graph", opt.graph,
               "Run every forward call as a CUDA graph replay, the way kernel-prof times it (the default: a kernel "
               "cannot tell checking from timing by its launch mode); --no-graph launches the steps one by one");
  app.add_flag("--runner", opt.runner, "Internal: be the per-GPU child (JSON Lines on stdin/stdout)")->group("");
  app.add_option("--gpu", opt.runner_gpu, "Internal: the runner's GPU")->group("");

  return cli.run(argc, argv, [&]() -> int {
    auto& common = cli.options();
    if (opt.runner) return kc::runner_main(opt.runner_gpu);

    kc::Policy policy = kc::Policy::load(opt.policy_path);
    auto tasks = read_tasks(opt.tasks_path);

    // The device: compile-only never touches it; otherwise no driver or GPU -> no_device verdicts.
    std::string no_device_why;
    std::vector<int> gpus;
    if (!opt.compile_only) {
      if (!ca::cuda::Driver::available(&no_device_why)) {
        ca::log::warn("no GPU: ", no_device_why, " (candidates get status no_device; use --compile-only for CPU checks)");
      } else {
        gpus = kc::parse_gpu_list(opt.gpus, ca::cuda::Driver::get().device_count);
        if (opt.arch.empty()) opt.arch = ca::cuda::Driver::get().device_info(gpus[0]).arch();
      }
    }
    if (opt.arch.empty()) opt.arch = "sm_90";
    static const std::regex arch_re(R"(^sm_\d+[a-z]?$)");
    if (!std::regex_match(opt.arch, arch_re)) throw ca::UsageError("--arch: expected sm_XX, got '" + opt.arch + "'");

    kc::PrepareOptions popt;
    popt.arch = opt.arch;
    popt.cache_dir = opt.cache_dir;
    popt.use_cache = !opt.no_cache;
    uint64_t base_seed = common.seed ? *common.seed : ca::unpredictable_seed();

    std::unique_ptr<ca::Store> store = ca::open_store_for(common);
    std::unique_ptr<kc::GpuJudge> judge;
    if (!gpus.empty()) judge = std::make_unique<kc::GpuJudge>(opt, policy, gpus, base_seed);

    ca::RecordReader reader(common.input);
    ca::RecordWriter writer(common.output);
    ca::Counts counts;
    std::map<std::string, int64_t> by_status;
    int64_t no_device = 0;

    struct Item {
      ca::Record record;
      std::string where;
      std::future<void> done;
      std::optional<ca::FieldError> bad;
      std::string status;
      bool resumed = false;
    };
    std::mutex store_mu;  // the store is read from compile threads and written from this one
    std::deque<std::unique_ptr<Item>> window;
    const size_t window_size = static_cast<size_t>(opt.jobs) + (judge ? judge->lanes() : 0) + 1;

    auto process = [&](Item& item) {
      ca::Record& rec = item.record;
      try {
        ca::check_record_ids(rec);
        std::string task_id = ca::get_required<std::string>(rec, "/task_id");
        ca::Json task_json;
        const ca::Json* task = nullptr;
        if (rec.contains("task") && rec["task"].is_object()) {
          task_json = ca::Json::parse(rec["task"].dump());
          task = &task_json;
        } else if (auto it = tasks.find(task_id); it != tasks.end()) {
          task = &it->second;
        } else if (store) {
          std::lock_guard<std::mutex> lock(store_mu);
          if (auto t = store->get_task(task_id)) {
            task_json = ca::Json::parse(t->dump());
            task = &task_json;
          }
        }
        if (!rec.contains("candidate_id"))
          rec["candidate_id"] = ca::candidate_id_for(task_id, ca::get_required<ca::Record>(rec, "/bundle"));
        // --resume: a verdict already in the store is reused (not a no_device or compile-only one).
        if (common.resume && store) {
          std::lock_guard<std::mutex> lock(store_mu);
          if (auto prev = store->latest("checks", rec["candidate_id"].get<std::string>())) {
            std::string st = prev->value("status", "");
            if (st != "no_device" && st != "compiled") {
              rec["check"] = *prev;
              item.status = st;
              item.resumed = true;
              return;
            }
          }
        }
        kc::Prepared p = kc::prepare_candidate(rec, task, policy, popt);
        if (!p.final && !opt.compile_only) {
          if (!judge) {
            kc::set_verdict(p.check, "no_device", "no GPU: " + no_device_why);
          } else if (!task || !task->contains("code")) {
            kc::set_verdict(p.check, "plan_error", "task " + task_id + " unknown: give the record a task object, or --tasks FILE");
            p.final = true;
          } else {
            judge->judge(p, *task, task_id, item.where);
          }
        } else if (!p.final) {
          p.check["status"] = "compiled";
          p.check["reason"] = "compile-only: compiled, plan and policy checks passed";
          p.check["correct"] = nullptr;
        }
        rec["check"] = p.check;
        item.status = p.check["status"].get<std::string>();
      } catch (const ca::FieldError& e) {
        item.bad = e;
      }
    };

    auto finish = [&](Item& item) {
      item.done.get();
      ++counts.read;
      if (item.bad) {
        ca::mark_bad_record(item.record, *item.bad, "kernel-check", item.where, common.strict);
        ++counts.bad;
      } else if (item.resumed) {
        ++counts.skipped;
        ++by_status[item.status];
      } else {
        ++by_status[item.status];
        if (item.status == "no_device") ++no_device;
        if (item.status == "passed" || item.status == "compiled") ++counts.done;
        else ++counts.failed;
        std::lock_guard<std::mutex> lock(store_mu);
        if (store) store->put_check(item.record["candidate_id"].get<std::string>(), item.record["task_id"].get<std::string>(),
                                    item.record["check"]);
        ca::log::verbose(item.where, ": ", item.status, ": ", item.record["check"].value("reason", ""));
      }
      writer.write(item.record);
    };

    ca::Record record;
    // A fatal line (not JSON, 1e999) ends the input, not the records read before it: they are
    // judged, stored and written first, then the error gives exit 2.
    std::exception_ptr input_error;
    for (;;) {
      try {
        if (!reader.next(record)) break;
      } catch (const ca::Error&) {
        input_error = std::current_exception();
        break;
      }
      if (!common.shard.contains(ca::record_key(record))) {
        ++counts.other_shard;
        continue;
      }
      auto item = std::make_unique<Item>();
      item->record = std::move(record);
      item->where = reader.where();
      Item* raw = item.get();
      item->done = std::async(std::launch::async, [&, raw] { process(*raw); });
      window.push_back(std::move(item));
      while (window.size() >= window_size) {
        finish(*window.front());
        window.pop_front();
      }
    }
    while (!window.empty()) {
      finish(*window.front());
      window.pop_front();
    }
    if (input_error) {
      ca::log::info(counts.text(), " before the bad line");
      std::rethrow_exception(input_error);
    }
    ca::Json statuses = by_status;
    ca::log::info(counts.text(), "; by status ", statuses.dump());
    if (store) store->end_run(no_device ? ca::kExitEnvironment : ca::kExitOk, counts.to_json());
    if (no_device) {
      ca::log::error(no_device, " candidate(s) not run: no GPU (", no_device_why, ")");
      return ca::kExitEnvironment;
    }
    return ca::kExitOk;
  });
}
