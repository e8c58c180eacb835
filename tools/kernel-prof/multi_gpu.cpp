// One child per GPU (see multi_gpu.hpp).
#include "tools/kernel-prof/multi_gpu.hpp"

#include <cctype>
#include <chrono>
#include <deque>
#include <memory>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"
#include "libcommon/record_loop.hpp"

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

int run_on_gpus(const ProfOptions& options, const CommonOptions& common, int argc, char** argv) {
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int g : options.gpus) {
    SpawnOptions so;
    so.argv = child_argv(common.argv, g);
    so.argv[0] = executable_dir() + "/kernel-prof";
    so.env_overrides = {{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "1"}, {"SLURM_ARRAY_TASK_MIN", "0"}};
    children.push_back(std::make_unique<ChildProcess>(so));
  }
  RecordReader reader(common.input);
  RecordWriter writer(common.output);
  std::deque<std::size_t> pending;  // child of each record in flight, in input order
  const std::size_t window = 2 * children.size();
  int status = kExitOk;
  auto collect_one = [&]() -> bool {
    std::size_t c = pending.front();
    pending.pop_front();
    for (;;) {
      auto line = children[c]->read_line(std::chrono::milliseconds(60000));
      if (line) {
        writer.write(parse_record_line(*line, log::cat("GPU ", options.gpus[c], " child output")));
        return true;
      }
      if (children[c]->eof()) {
        auto rc = children[c]->wait(std::chrono::milliseconds(10000));
        status = rc ? *rc : kExitInternal;
        log::error("the child timing on GPU ", options.gpus[c], " ended early (", children[c]->status_text(), ")");
        return false;
      }
    }
  };
  Record record;
  int64_t dealt = 0, other = 0;
  bool ok = true;
  while (ok && reader.next(record)) {
    if (!common.shard.contains(record_key(record))) {
      ++other;
      continue;
    }
    std::size_t c = std::size_t(dealt++ % int64_t(children.size()));
    if (!children[c]->write(record.dump() + "\n")) {
      status = kExitInternal;
      ok = false;
      break;
    }
    pending.push_back(c);
    if (pending.size() >= window) ok = collect_one();
  }
  for (auto& ch : children) ch->close_stdin();
  while (ok && !pending.empty()) ok = collect_one();
  for (auto& ch : children) {
    auto rc = ch->wait(std::chrono::milliseconds(600000));
    if (rc && *rc != 0 && status == kExitOk) status = *rc;
  }
  log::info(dealt, " records dealt to ", children.size(), " GPUs", other ? log::cat(", ", other, " in other shards") : "");
  return status;
}

}  // namespace ca::prof
