// The reference worker's client: finds a Python with torch, keeps one worker child alive, turns
// hangs, deaths and memory blow-ups of task code into error answers, restarting the child.
#include "libcommon/worker/worker_client.hpp"

#include <glob.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"
#include "libcommon/worker/requests.hpp"

namespace fs = std::filesystem;
using namespace std::chrono;

namespace ca {
namespace {

// Last `max_bytes` of a file, from the start of a line, for error details.
std::string file_tail(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  auto size = static_cast<std::size_t>(in.tellg());
  std::size_t start = size > max_bytes ? size - max_bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (start > 0) {
    auto nl = text.find('\n');
    if (nl != std::string::npos) text.erase(0, nl + 1);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Resident set of a process in MiB, from /proc (0 when unknown).
std::size_t resident_mb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return static_cast<std::size_t>(std::atoll(line.c_str() + 6)) / 1024;
  return 0;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// Why a candidate interpreter cannot be used, or empty when it imports torch.
std::string check_python(const std::string& python) {
  SpawnOptions so;
  so.argv = {python, "-c", "import torch, sys; sys.stdout.write(torch.__version__)"};
  CommandResult r;
  try {
    r = run_command(so, "", seconds(120), 1 << 16);
  } catch (const Error& e) {
    return e.what();
  }
  if (r.timed_out) return "timed out importing torch";
  if (r.exit_status != 0) {
    std::string why = last_line(r.err);
    return why.empty() ? "exit " + std::to_string(r.exit_status) : why;
  }
  return "";
}

}  // namespace

struct WorkerClient::Impl {
  WorkerOptions opt;
  std::string python;
  PrivateTempDir tmp{"cuda-agent-worker"};
  std::unique_ptr<ChildProcess> child;
  Json hello;
  std::string log_path;
  int spawns = 0;
  int restarts = 0;
  int64_t next_id = 1;
  int64_t file_counter = 0;
  std::map<std::string, Json> loads;  // task_id -> the last successful load request

  // One request with the load replay of a restarted worker (WorkerClient::request adds admission).
  Json send(const Json& req, milliseconds timeout);

  void start() {
    log_path = tmp.path() + "/worker-" + std::to_string(spawns) + ".log";
    std::string pythonpath = python_dir();
    if (const char* pp = std::getenv("PYTHONPATH"); pp && *pp) pythonpath += std::string(":") + pp;
    char cpu[64];
    std::snprintf(cpu, sizeof cpu, "%.3f", opt.cpu_seconds_limit);
    SpawnOptions so;
    so.argv = {python,      "-u",  "-m",     "cuda_agent_worker", "--device", opt.device, "--cpu-seconds", cpu,
               "--memory-mb", std::to_string(opt.memory_limit_mb), "--log", log_path, "--work-dir", tmp.path()};
    so.env_overrides = {{"PYTHONPATH", pythonpath}, {"PYTHONDONTWRITEBYTECODE", "1"}, {"PYTHONUNBUFFERED", "1"}};
    child = std::make_unique<ChildProcess>(so);
    if (spawns++ > 0) ++restarts;
    auto line = child->read_line(opt.start_timeout);
    std::string tail = file_tail(log_path, 2000);
    if (!line) {
      child->kill();
      std::string status = child->status_text();
      child.reset();
      throw EnvironmentError("the reference worker (" + python + " -m cuda_agent_worker) did not start" +
                             (status.empty() ? " within the start timeout" : ": " + status) +
                             (tail.empty() ? "" : "; its log ends:\n" + tail));
    }
    Json h;
    try {
      h = Json::parse(*line);
    } catch (const std::exception&) {
      child->kill();
      child.reset();
      throw EnvironmentError("the reference worker answered something that is not JSON: " + line->substr(0, 200));
    }
    if (!h.value("ok", false)) {
      child->kill();
      child.reset();
      std::string err = h.value("error", "?");
      throw EnvironmentError("reference worker: " + err + ": " + h.value("detail", std::string("")));
    }
    hello = std::move(h);
    log::verbose("reference worker started: pid ", hello.value("pid", -1), ", torch ",
                 hello.value("torch_version", std::string("?")), ", ", opt.device, ", ", python);
  }

  void stop() {
    if (!child) return;
    child->close_stdin();
    if (!child->wait(milliseconds(2000))) child->kill();
    child.reset();
  }

  Json failure(const Json& req, const std::string& error, const std::string& detail) {
    Json a = {{"ok", false}, {"error", error}, {"detail", detail}};
    if (req.contains("id")) a["id"] = req["id"];
    if (req.contains("op")) a["op"] = req["op"];
    if (req.contains("task_id")) a["task_id"] = req["task_id"];
    return a;
  }

  // The child died or was killed: answer with why, forget it (restarted at the next request).
  Json died(const Json& req, const std::string& error, const std::string& why) {
    if (child) child->kill();
    std::string status = child ? child->status_text() : "";
    child.reset();
    std::string tail = file_tail(log_path, 1500);
    std::string detail = why + (status.empty() ? "" : " (" + status + ")") + (tail.empty() ? "" : "; log: " + tail);
    log::warn("reference worker: ", why, status.empty() ? "" : " (" + status + ")", "; restarting it");
    return failure(req, error, detail);
  }

  Json exchange(Json req, milliseconds timeout) {
    if (!child || !child->running()) {
      if (child) died(req, "worker_died", "the worker had exited");  // logs; the answer is for a later caller
      start();
    }
    req["id"] = next_id++;
    const auto op = req.value("op", std::string("?"));
    if (!child->write(req.dump() + "\n")) return died(req, "worker_died", "the worker closed its input");
    auto deadline = steady_clock::now() + timeout;
    for (;;) {
      auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
      if (left.count() <= 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "no answer to '%s' within %.1f s; worker killed", op.c_str(),
                      static_cast<double>(timeout.count()) / 1000.0);
        return died(req, "timeout", buf);
      }
      auto line = child->read_line(std::min(left, milliseconds(200)));
      if (line) {
        Json a;
        try {
          a = Json::parse(*line);
        } catch (const std::exception&) {
          log::debug("reference worker: skipping a non-JSON line: ", line->substr(0, 200));
          continue;
        }
        if (!a.is_object() || a.value("id", Json()) != req["id"]) {
          log::debug("reference worker: skipping a stale answer: ", line->substr(0, 200));
          continue;
        }
        return a;
      }
      if (child->eof() || !child->running()) return died(req, "worker_died", "the worker died during '" + op + "'");
      if (opt.memory_limit_mb > 0) {
        std::size_t rss = resident_mb(child->pid());
        if (rss > opt.memory_limit_mb)
          return died(req, "memory_limit", "the worker's resident set reached " + std::to_string(rss) +
                                               " MiB, over the limit of " + std::to_string(opt.memory_limit_mb) +
                                               " MiB; worker killed");
      }
    }
  }
};

WorkerClient::WorkerClient(WorkerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->python = impl_->opt.python.empty() ? find_python() : impl_->opt.python;
  impl_->start();
}

WorkerClient::~WorkerClient() {
  if (impl_) impl_->stop();
}

Json WorkerClient::request(const Json& request) { return this->request(request, impl_->opt.request_timeout); }

namespace {

// GPU memory admission: one policy for every client of a device in this process (kernel-check's
// lanes, ops-synth's -j workers, kernel-prof). Requests that allocate on the GPU run shared; one
// that failed for want of memory waits until no other is running, then runs again alone, so a
// large task waits for room instead of failing for its neighbours' sake. Exclusive waiters come
// first (no starvation by a stream of small requests). Workers give cached memory back whenever
// the device runs low (worker.py), so "alone" means the device's memory is this task's.
class MemoryGate {
 public:
  void lock_shared() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !exclusive_ && waiting_ == 0; });
    ++shared_;
  }
  void unlock_shared() {
    std::lock_guard<std::mutex> l(mu_);
    --shared_;
    cv_.notify_all();
  }
  void lock() {
    std::unique_lock<std::mutex> l(mu_);
    ++waiting_;
    cv_.wait(l, [&] { return !exclusive_ && shared_ == 0; });
    --waiting_;
    exclusive_ = true;
  }
  void unlock() {
    std::lock_guard<std::mutex> l(mu_);
    exclusive_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int shared_ = 0, waiting_ = 0;
  bool exclusive_ = false;
};

MemoryGate& memory_gate(const std::string& device) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<MemoryGate>> gates;
  std::lock_guard<std::mutex> l(mu);
  auto& g = gates[device];
  if (!g) g = std::make_unique<MemoryGate>();
  return *g;
}

bool allocates_on_gpu(const std::string& op) {
  return op == "load" || op == "inputs" || op == "reference" || op == "time" || op == "filters";
}

// The answer of a request that failed (or, for filters, whose verdict was lost) for want of GPU
// memory: torch's OutOfMemoryError, a library's allocation failure, the driver's.
bool out_of_memory(const Json& a) {
  if (a.value("lost_to_memory", false)) return true;
  if (a.value("ok", true)) return false;
  const std::string text = a.value("detail", std::string()) + "\n" + a.value("traceback", std::string());
  for (const char* s : {"out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "ALLOC_FAILED", "OutOfMemoryError"})
    if (text.find(s) != std::string::npos) return true;
  return false;
}

}  // namespace

Json WorkerClient::request(const Json& request, milliseconds timeout) {
  if (!request.is_object() || !request.contains("op"))
    throw InternalError("WorkerClient::request: a request is an object with \"op\"");
  Json req = request;
  req.erase("id");
  const std::string op = req.value("op", std::string());
  if (impl_->opt.device.rfind("cuda", 0) != 0 || !allocates_on_gpu(op)) return impl_->send(req, timeout);
  MemoryGate& gate = memory_gate(impl_->opt.device);
  {
    std::shared_lock<MemoryGate> running(gate);
    Json a = impl_->send(req, timeout);
    if (!out_of_memory(a)) return a;
  }
  log::verbose("reference worker: ", op, " ran out of GPU memory; waiting to run it alone on ", impl_->opt.device);
  std::unique_lock<MemoryGate> alone(gate);
  impl_->exchange({{"op", "release"}, {"keys", Json::array()}, {"empty_cache", true}}, timeout);
  Json a = impl_->send(req, timeout);
  a["memory_admission"] = "alone";  // it waited for the device to itself
  return a;
}

Json WorkerClient::Impl::send(const Json& req, milliseconds timeout) {
  Json a = exchange(req, timeout);
  const std::string op = req.value("op", std::string());
  if (op == "load" && a.value("ok", false) && req.contains("task_id"))
    loads[req["task_id"].is_string() ? req["task_id"].get<std::string>() : req["task_id"].dump()] = req;
  if (op == "unload" && req.contains("task_id"))
    loads.erase(req["task_id"].is_string() ? req["task_id"].get<std::string>() : req["task_id"].dump());
  // A restarted worker has forgotten its tasks: replay the load once and retry.
  if (!a.value("ok", true) && a.value("error", std::string()) == "unknown_task" && req.contains("task_id")) {
    std::string tid = req["task_id"].is_string() ? req["task_id"].get<std::string>() : req["task_id"].dump();
    auto it = loads.find(tid);
    if (it != loads.end()) {
      log::verbose("reference worker: reloading task ", tid);
      Json la = exchange(it->second, timeout);
      if (!la.value("ok", false)) {
        la["detail"] = "reloading the task failed: " + la.value("detail", std::string());
        la["op"] = op;
        return la;
      }
      a = exchange(req, timeout);
    }
  }
  return a;
}

const std::string& WorkerClient::temp_dir() const { return impl_->tmp.path(); }

std::string WorkerClient::temp_path(const std::string& stem) {
  return impl_->tmp.path() + "/" + stem + "-" + std::to_string(impl_->file_counter++) + ".safetensors";
}

std::string WorkerClient::python() const { return impl_->python; }
const Json& WorkerClient::hello() const { return impl_->hello; }
int WorkerClient::restarts() const { return impl_->restarts; }
pid_t WorkerClient::worker_pid() const { return impl_->child ? impl_->child->pid() : -1; }
const WorkerOptions& WorkerClient::options() const { return impl_->opt; }

std::string WorkerClient::find_python() {
  static std::mutex mu;
  static std::string found;
  std::lock_guard<std::mutex> lock(mu);
  if (!found.empty()) return found;

  std::vector<std::string> candidates;
  bool explicit_choice = false;
  if (const char* e = std::getenv("CUDA_AGENT_PYTHON"); e && *e) {
    candidates.push_back(e);  // the user's choice is the only one tried
    explicit_choice = true;
  } else {
    if (auto p = find_on_path("python3"); !p.empty()) candidates.push_back(p);
    for (const char* c : {"/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python3"})
      candidates.push_back(c);
    glob_t g{};
    if (glob("/opt/*/bin/python3", 0, nullptr, &g) == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) candidates.push_back(g.gl_pathv[i]);
    globfree(&g);
  }
  std::vector<std::string> seen, tried;
  for (auto& c : candidates) {
    std::error_code ec;
    std::string real = fs::exists(c, ec) ? fs::canonical(c, ec).string() : c;
    if (!explicit_choice && !fs::exists(c, ec)) continue;
    // Same binary, different names (a venv's python3 links to the system one but has other packages):
    // dedupe by the path we run, not the link target.
    if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
    seen.push_back(c);
    std::string why = check_python(c);
    if (why.empty()) {
      found = c;
      log::verbose("python with torch: ", c, real != c ? " (" + real + ")" : "");
      return found;
    }
    tried.push_back(c + ": " + why);
  }
  std::string msg = "no Python that can `import torch` was found (the reference worker needs PyTorch); tried:";
  if (tried.empty()) msg += " nothing (no python3 on PATH, none under /usr/bin, /usr/local/bin, /opt)";
  for (auto& t : tried) msg += "\n  " + t;
  msg += explicit_choice ? "\n$CUDA_AGENT_PYTHON names the interpreter to use; fix or unset it."
                         : "\nInstall PyTorch (Debian: apt install python3-torch, or `make deps`) or set "
                           "CUDA_AGENT_PYTHON to an interpreter that has it.";
  throw EnvironmentError(msg);
}

int64_t task_init_seed(const Json& task) {
  if (task.contains("seed") && task["seed"].is_number_integer()) return task["seed"].get<int64_t>();
  return 0;
}

Trial draw_trial(WorkerClient& worker, const std::string& task_id, uint64_t seed, const TrialKeys& keys) {
  Trial t;
  Json a = worker.request(worker_request::inputs(task_id, seed, keys.inputs));
  if (!a.value("ok", false)) {
    t.failed = "inputs";
    t.answer = std::move(a);
    return t;
  }
  t.inputs = std::move(a["tensors"]);
  Json b = worker.request(worker_request::reference(task_id, keys.inputs, keys.reference, keys.params));
  if (!b.value("ok", false)) {
    t.failed = "reference";
    t.answer = std::move(b);
    return t;
  }
  t.reference = std::move(b["tensors"]);
  if (keys.params) t.params = std::move(b["params"]);
  if (b.contains("forward_ms") && b["forward_ms"].is_number()) t.forward_ms = b["forward_ms"].get<double>();
  return t;
}

}  // namespace ca
