// ops-synth import: KernelBench problem files and Ops-6K rows -> task records; the worker's `load`
// fills the input/output specs, init inputs and parameter names.
#include "tools/ops-synth/import.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <memory>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_path.hpp"
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

// What an import reads, in order: .py files (sorted within a directory) and JSON Lines streams.
struct Source {
  bool jsonl;
  fs::path path, root;
};

std::vector<Source> expand_sources(const std::vector<std::string>& given) {
  std::vector<Source> sources;
  for (const auto& s : given) {
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
  return sources;
}

// The record path's source over every Source: a .py file is one record (where: its path), a JSON
// Lines stream one per line (where: "FILE line N"); an Ops-6K row keeps every key it has.
ca::RecordSource import_source(std::vector<Source> sources) {
  struct State {
    std::vector<Source> sources;
    std::size_t next = 0;
    std::unique_ptr<ca::RecordReader> jsonl;
  };
  auto st = std::make_shared<State>();
  st->sources = std::move(sources);
  return [st](ca::Json& record, std::string& where) {
    for (;;) {
      if (st->jsonl) {
        if (st->jsonl->next(record)) {
          where = st->jsonl->where();
          if (!record.contains("schema")) record["schema"] = "cuda-agent/task/v1";
          return true;
        }
        st->jsonl.reset();
      }
      if (st->next >= st->sources.size()) return false;
      const Source& src = st->sources[st->next++];
      if (src.jsonl) {
        st->jsonl = std::make_unique<ca::RecordReader>(src.path.string());
        continue;
      }
      record = kernelbench_record(src.path, src.root);
      where = src.path.string();
      return true;
    }
  };
}

// A record's specs from the worker's `load` (none with --no-worker). Failed when the worker could
// not load it: the record gets an error section saying why.
ca::Outcome fill(ca::worker::WorkerClient* worker, ca::RecordItem& item) {
  ca::Json& rec = item.record;
  std::string code = ca::get_required<std::string>(rec, "/code");
  if (!rec.contains("task_id")) {
    ca::Json key{{"code", code}};
    if (rec.contains("reference")) key["reference"] = rec["reference"];  // an eval task is another task
    rec["task_id"] = ca::task_id_for(key);
  }
  if (!rec.contains("data_source")) rec["data_source"] = "import";
  // The mode the reference runs in: the record's (train unless it says eval; another value is a bad
  // record naming reference.mode), stated in every record; without a worker, nothing is measured.
  const std::string mode = ca::worker::request::task_mode(rec);
  if (!worker) {
    set_reference(rec, ca::Json{{"mode", mode}});
    return ca::Outcome::done;
  }
  const std::string task_id = ca::get_required<std::string>(rec, "/task_id");  // a numeric one is a bad record
  ca::Json ans = worker->request(ca::worker::request::load(task_id, ca::Json(rec)));
  if (!ans.value("ok", false)) {
    const std::string why = ans.value("error", std::string("error")) + ": " + ans.value("detail", std::string());
    rec["error"] = ca::Json{{"tool", "ops-synth"}, {"field", "code"}, {"reason", why}, {"where", item.where}};
    return ca::Outcome::failed;
  }
  for (const char* key : {"inputs", "outputs", "init_inputs", "params"})
    if (ans.contains(key)) rec[key] = ca::Json(ans[key]);
  set_reference(rec, ca::worker::request::reference_section(ans, mode));
  worker->request(ca::worker::request::unload(task_id));
  return ca::Outcome::done;
}

}  // namespace

int run_import(const ca::CommonOptions& common, const ImportOptions& opt) {
  std::vector<Source> sources = expand_sources(opt.sources);
  auto store = ca::open_store_for(common);
  std::vector<std::unique_ptr<ca::worker::WorkerClient>> workers;
  if (!opt.no_worker) {
    ca::worker::WorkerOptions worker;
    worker.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(opt.timeout_s * 1000));
    worker.memory_limit_mb = worker_memory_mb(opt.worker_memory_mb, opt.jobs);
    worker.one_task_per_process = true;  // its tasks are what is being vetted: none may change another's
    workers = start_workers(opt.jobs, std::vector<std::string>(static_cast<std::size_t>(opt.jobs), opt.device), worker);
  }
  ca::RecordPathOptions path_options;
  path_options.lanes = opt.no_worker ? 1 : opt.jobs;
  path_options.window = 4 * static_cast<int64_t>(path_options.lanes);
  path_options.store = store.get();
  ca::RecordPath path(common, path_options);
  ca::RecordJob<ca::RecordItem> job;
  job.work = [&](int lane, ca::RecordItem& item) {
    return fill(workers.empty() ? nullptr : workers[static_cast<std::size_t>(lane)].get(), item);
  };
  job.emit = [&](ca::RecordItem& item) {
    if (item.outcome == ca::Outcome::failed)
      ca::log::warn(item.where, ": load failed: ", item.record["error"]["reason"].get<std::string>().substr(0, 300));
    else if (store) store->put_task(item.record);
  };
  int status = ca::kExitOk;
  try {
    ca::RecordWriter writer(common.output);
    path.run<ca::RecordItem>(import_source(std::move(sources)), job, [&](const ca::Json& r) { writer.write(r); });
  } catch (const ca::Error& e) {
    ca::report_error(e);
    status = e.exit_code;
  }
  return path.end(status, opt.no_worker ? " (no specs: --no-worker)" : "");
}

}  // namespace ca::ops_synth
