// One child per GPU (see multi_gpu.hpp).
#include "tools/kernel-prof/multi_gpu.hpp"

#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"
#include "libcommon/record_path.hpp"

namespace ca::prof {

std::vector<std::string> child_argv(const std::vector<std::string>& argv, int ordinal) {
  std::vector<std::string> out{argv.empty() ? "kernel-prof" : argv[0]};
  auto takes_value = [](const std::string& a) {
    return a == "--gpus" || a == "-i" || a == "--input" || a == "-o" || a == "--output" || a == "--shard";
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
    for (const char* p : {"--gpus=", "--input=", "--output=", "--shard="})
      joined |= a.rfind(p, 0) == 0;
    if (joined) continue;
    out.push_back(a);
  }
  for (const std::string& s : {std::string("--gpus"), std::to_string(ordinal), std::string("-i"), std::string("-"),
                              std::string("-o"), std::string("-"), std::string("--shard"), std::string("0/1")})
    out.push_back(s);
  return out;
}

namespace {

// One record through a lane's child: the line it answers with, or InternalError when it ended early
// (`child_status` keeps the first such child's exit code).
std::string ask_child(ChildProcess& child, int gpu, const Json& record, std::atomic<int>& child_status) {
  const bool sent = child.write(record.dump() + "\n");
  for (;;) {
    if (sent)
      if (auto line = child.read_line(std::chrono::milliseconds(60000))) return std::move(*line);
    if (!sent || child.eof()) {
      auto rc = child.wait(std::chrono::milliseconds(10000));
      int expected = kExitOk;
      child_status.compare_exchange_strong(expected, rc && *rc != 0 ? *rc : kExitInternal);
      throw InternalError(log::cat("the child timing on GPU ", gpu, " ended early (", child.status_text(), ")"));
    }
  }
}

}  // namespace

int run_on_gpus(const ProfOptions& options, const CommonOptions& common, int argc, char** argv) {
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int g : options.gpus) {
    SpawnOptions so;
    so.argv = child_argv(common.argv, g);
    so.argv[0] = executable_dir() + "/kernel-prof";
    so.env_overrides = {{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "1"}, {"SLURM_ARRAY_TASK_MIN", "0"}};
    children.push_back(std::make_unique<ChildProcess>(so));
  }
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
    const auto i = static_cast<std::size_t>(lane);
    item.answer = ask_child(*children[i], options.gpus[i], item.record, child_status);
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

}  // namespace ca::prof
