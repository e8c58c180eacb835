// ops-synth import: KernelBench problem files and Ops-6K rows -> task records; the worker's `load`
// fills the input/output specs, init inputs and parameter names.
#include "tools/ops-synth/import.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"
#include "libcommon/worker/requests.hpp"
#include "tools/ops-synth/pool.hpp"

namespace fs = std::filesystem;

namespace ca::ops_synth {

void ImportOptions::register_with(CLI::App* app) {
  app->add_option("sources", sources,
                  "KernelBench directories (level folders of .py files), .py files, or Ops-6K .jsonl ('-' = stdin)")
      ->required();
  app->add_option("--device", device, "Worker device for load (cpu, cuda:0)")->capture_default_str();
  app->add_flag("--no-worker", no_worker, "Do not run the code: records without specs (no torch needed)");
  app->add_option("-j,--jobs", jobs, "Reference workers in parallel")->capture_default_str();
  app->add_option("--timeout", timeout_s, "Seconds per worker request")->capture_default_str();
  app->add_option("--worker-memory", worker_memory_mb,
                  "Memory in MiB all reference workers together may hold (each of -j gets its share; resident sets of "
                  "its processes and the files it writes); 0: three quarters of this host's, at most 16 GiB each")
      ->capture_default_str();
}

namespace {

// "level1" / "level_2" / "3" in a path -> "level1".. ; "" when none.
std::string level_of(const fs::path& p) {
  for (auto it = p.begin(); it != p.end(); ++it) {
    std::string part = it->string();
    std::string lower;
    for (char c : part) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.rfind("level", 0) == 0) {
      std::string digits;
      for (char c : lower.substr(5))
        if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
      if (!digits.empty()) return "level" + digits;
    }
  }
  return "";
}

ca::Json kernelbench_record(const fs::path& file, const fs::path& root) {
  ca::Json rec;
  rec["schema"] = "cuda-agent/task/v1";
  std::string code = ca::read_file(file.string());
  rec["task_id"] = ca::task_id_for(ca::Json{{"code", code}});
  rec["name"] = file.stem().string();
  std::string level = level_of(fs::relative(file, root.has_parent_path() ? root.parent_path() : root));
  if (level.empty()) level = level_of(file);
  rec["ops"] = ca::Json::array();
  rec["data_source"] = "kernelbench#" + (level.empty() ? std::string("unknown") : level);
  rec["code"] = std::move(code);
  rec["source"] = ca::Json{{"kind", "kernelbench"}, {"path", file.string()}, {"level", level}};
  return rec;
}

}  // namespace

int run_import(const ca::CommonOptions& common, const ImportOptions& opt) {
  // Expand sources into a list of producers: .py files (sorted within directories) and JSONL streams.
  struct Source {
    bool jsonl;
    fs::path path, root;
  };
  std::vector<Source> sources;
  for (const auto& s : opt.sources) {
    fs::path p(s);
    if (s == "-" || p.extension() == ".jsonl" || p.extension() == ".json") {
      sources.push_back({true, p, p});
    } else if (fs::is_directory(p)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".py") files.push_back(e.path());
      std::sort(files.begin(), files.end());
      if (files.empty()) ca::log::warn(s, ": no .py files");
      for (auto& f : files) sources.push_back({false, f, p});
    } else if (fs::is_regular_file(p) && p.extension() == ".py") {
      sources.push_back({false, p, p.parent_path()});
    } else {
      throw ca::UsageError("import: '" + s + "' is not a directory, a .py file or a .jsonl file");
    }
  }
  auto store = ca::open_store_for(common);
  ca::RecordWriter writer(common.output);
  int64_t read = 0, done = 0, failed = 0, bad = 0;
  std::size_t si = 0;
  std::unique_ptr<ca::RecordReader> jsonl;

  auto next = [&](PoolItem& item) -> bool {
    for (;;) {
      if (jsonl) {
        if (jsonl->next(item.record)) {
          ++read;
          item.where = jsonl->where();
          // An Ops-6K row keeps every key it has; ours are added around it.
          if (!item.record.contains("schema")) item.record["schema"] = "cuda-agent/task/v1";
          return true;
        }
        jsonl.reset();
      }
      if (si >= sources.size()) return false;
      const Source& src = sources[si++];
      if (src.jsonl) {
        jsonl = std::make_unique<ca::RecordReader>(src.path.string());
        continue;
      }
      ++read;
      item.record = kernelbench_record(src.path, src.root);
      item.where = src.path.string();
      return true;
    }
  };
  auto fill = [&](ca::WorkerClient* worker, PoolItem& item) {
    ca::Json& rec = item.record;
    try {
      std::string code = ca::get_required<std::string>(rec, "/code");
      if (!rec.contains("task_id")) rec["task_id"] = ca::task_id_for(ca::Json{{"code", code}});
      if (!rec.contains("data_source")) rec["data_source"] = "import";
      if (!worker) return;
      const std::string task_id = ca::get_required<std::string>(rec, "/task_id");  // a numeric one is a bad record
      ca::Json ans = worker->request(ca::worker_request::load(task_id, ca::Json(rec)));
      if (!ans.value("ok", false)) {
        item.result = ans.value("error", std::string("error")) + ": " + ans.value("detail", std::string());
        rec["error"] = ca::Json{{"tool", "ops-synth"}, {"field", "code"}, {"reason", item.result},
                                  {"where", item.where}};
        return;
      }
      // stochastic: the load ran the reference from two RNG states (kernel-check's task_stochastic rule).
      for (const char* key : {"inputs", "outputs", "init_inputs", "params", "stochastic"})
        if (ans.contains(key)) rec[key] = ca::Json(ans[key]);
      worker->request(ca::worker_request::unload(task_id));
    } catch (const ca::FieldError& e) {
      ca::mark_bad_record(rec, e, "ops-synth", item.where, common.strict);
      item.bad = true;
    }
  };
  auto emit = [&](PoolItem& item) {
    if (item.bad) ++bad;
    else if (!item.result.empty()) {
      ++failed;
      ca::log::warn(item.where, ": load failed: ", item.result.substr(0, 300));
    } else {
      ++done;
      if (store) store->put_task(item.record);
    }
    writer.write(item.record);
  };
  if (opt.no_worker) {
    PoolItem item;
    while (next(item)) {
      fill(nullptr, item);
      emit(item);
      item = PoolItem{};
    }
  } else {
    std::vector<std::string> devices;
    for (int i = 0; i < opt.jobs; ++i) devices.push_back(opt.device);
    ca::WorkerOptions worker;
    worker.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(opt.timeout_s * 1000));
    worker.memory_limit_mb = worker_memory_mb(opt.worker_memory_mb, opt.jobs);
    run_pool(opt.jobs, devices, worker, next,
             [&](ca::WorkerClient& w, PoolItem& item) { fill(&w, item); }, emit);
  }
  ca::log::info(read, " read, ", done, " imported", opt.no_worker ? " (no specs: --no-worker)" : "", ", ", failed,
                " failed to load, ", bad, " bad records");
  if (store) store->end_run(ca::kExitOk, ca::Json{{"read", read}, {"done", done}, {"failed", failed}, {"bad", bad}});
  return ca::kExitOk;
}

}  // namespace ca::ops_synth
