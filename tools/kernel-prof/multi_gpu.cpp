// One child per GPU (see multi_gpu.hpp).
#include "tools/kernel-prof/multi_gpu.hpp"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "libcommon/worker/worker_client.hpp"
#include "libcommon/process.hpp"
#include "libcommon/record_path.hpp"

namespace ca::kernel_prof {

std::vector<std::string> child_argv(const std::vector<std::string>& argv, int ordinal, std::size_t worker_memory_mb) {
  std::vector<std::string> out{argv.empty() ? "kernel-prof" : argv[0]};
  auto takes_value = [](const std::string& a) {
    return a == "--gpus" || a == "-i" || a == "--input" || a == "-o" || a == "--output" || a == "--shard" ||
           a == "--worker-memory";
  };
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (takes_value(a)) {
      ++i;
      // "--gpus 0 1" (space-separated values) as well as "--gpus 0,1"
      if (a == "--gpus")
        while (i + 1 < argv.size() && !argv[i + 1].empty() && std::isdigit(static_cast<unsigned char>(argv[i + 1][0]))) ++i;
      continue;
    }
    bool joined = false;
    for (const char* p : {"--gpus=", "--input=", "--output=", "--shard=", "--worker-memory="})
      joined |= a.rfind(p, 0) == 0;
    if (joined) continue;
    out.push_back(a);
  }
  for (const std::string& s : {std::string("--gpus"), std::to_string(ordinal), std::string("-i"), std::string("-"),
                              std::string("-o"), std::string("-"), std::string("--shard"), std::string("0/1"),
                              std::string("--worker-memory"), std::to_string(worker_memory_mb)})
    out.push_back(s);
  return out;
}

bool is_child() {
  const char* v = std::getenv(kChildEnv);
  return v && *v;
}

GpuChild::GpuChild(const CommonOptions& common, int gpu, bool own_store, std::size_t worker_memory_mb) : gpu_(gpu) {
  std::vector<std::string> argv = child_argv(common.argv, gpu, worker_memory_mb);
  if (!own_store) {
    std::vector<std::string> kept;
    for (std::size_t i = 0; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a == "--store" || a == "--serve") {
        ++i;
        continue;
      }
      if (a == "--resume" || a == "--accept-tasks" || a.rfind("--store=", 0) == 0 || a.rfind("--serve=", 0) == 0) continue;
      kept.push_back(a);
    }
    argv = std::move(kept);
    argv.push_back("--no-store");
  }
  argv[0] = "/proc/self/exe";  // this very file, even when its path was replaced under a running service
  spawn_.argv = std::move(argv);
  spawn_.env_overrides = {{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "1"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                          {kChildEnv, "1"}};
  child_ = std::make_unique<ChildProcess>(spawn_);
}

GpuChild::~GpuChild() = default;

std::string GpuChild::ask(const Json& record) {
  for (bool retried = false;; retried = true) {
    const bool sent = child_->write(record.dump() + "\n");
    for (;;) {
      if (sent)
        if (auto line = child_->read_line(std::chrono::milliseconds(60000))) return std::move(*line);
      if (!sent || child_->eof()) break;
    }
    auto rc = child_->wait(std::chrono::milliseconds(10000));
    if (rc && *rc == kExitContextLost && !retried) {
      // Its last answer was the record whose candidate killed the context: this one goes to a fresh child.
      log::warn("GPU ", gpu_, ": a candidate killed the child's GPU context; a fresh child takes the next record");
      ++restarts_;
      child_ = std::make_unique<ChildProcess>(spawn_);
      continue;
    }
    ended_ = rc && *rc != 0 ? *rc : kExitInternal;
    throw InternalError(log::cat("the child timing on GPU ", gpu_, " ended early (", child_->status_text(), ")"));
  }
}

void GpuChild::close_stdin() { child_->close_stdin(); }
std::optional<int> GpuChild::wait(std::chrono::milliseconds timeout) { return child_->wait(timeout); }

int run_on_gpus(const ProfOptions& options, const CommonOptions& common, int argc, char** argv) {
  std::vector<std::unique_ptr<GpuChild>> children;
  const std::size_t share = worker::worker_memory_share_mb(options.worker_memory_mb, static_cast<int>(options.gpus.size()));
  for (int g : options.gpus) children.push_back(std::make_unique<GpuChild>(common, g, /*own_store=*/true, share));
  // The record path, a lane per child: this shard's records, a free GPU takes the next one, and the
  // answers are written in input order (the children time and store them).
  struct Item : RecordItem {
    std::string answer;
  };
  RecordPathOptions path_options;
  path_options.lanes = static_cast<int>(children.size());
  RecordPath path(common, path_options);
  std::atomic<int> child_status{kExitOk};
  RecordJob<Item> job;
  job.work = [&](int lane, Item& item) {
    GpuChild& child = *children[static_cast<std::size_t>(lane)];
    try {
      item.answer = child.ask(item.record);
    } catch (const InternalError&) {
      int expected = kExitOk;
      child_status.compare_exchange_strong(expected, child.ended_status());
      throw;
    }
    return Outcome::done;
  };
  job.emit = [](Item& item) { item.record = parse_record_line(item.answer, "a GPU child's output"); };
  int status = path.stream(job);
  if (status == kExitInternal && child_status.load() != kExitOk) status = child_status.load();
  for (auto& ch : children) ch->close_stdin();
  for (auto& ch : children) {
    auto rc = ch->wait(std::chrono::milliseconds(600000));
    if (rc && *rc != 0 && status == kExitOk) status = *rc;
  }
  return path.end(status, log::cat("; ", path.totals().done, " records dealt to ", children.size(), " GPUs"));
}

}  // namespace ca::kernel_prof
