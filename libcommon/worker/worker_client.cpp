// The reference worker's client: finds a Python with torch, keeps one worker child alive, turns
// hangs, deaths and memory blow-ups of task code into error answers, restarting the child.
#include "libcommon/worker/worker_client.hpp"

#include <dirent.h>
#include <glob.h>
#include <signal.h>
#include <sys/stat.h>
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

#include "libcommon/confine.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"
#include "libcommon/worker/namespace_sandbox.hpp"
#include "libcommon/worker/requests.hpp"

extern char** environ;

namespace fs = std::filesystem;
using namespace std::chrono;

namespace ca::worker {
namespace {

// GPU memory ran out, in a worker's words: torch's OutOfMemoryError or "CUDA error: out of memory"
// (a context that could not be made), a library's allocation failure, the driver's.
bool says_out_of_memory(const std::string& text) {
  for (const char* s : {"out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "ALLOC_FAILED", "OutOfMemoryError"})
    if (text.find(s) != std::string::npos) return true;
  return false;
}

// A worker that could not start on its GPU for want of memory (its CUDA context; the device shared
// with other workers whose tasks hold it). Answered like a request that ran out of memory, so
// WorkerClient::request starts it again when no other request runs.
struct StartOutOfMemory : EnvironmentError {
  using EnvironmentError::EnvironmentError;
};

// The worker's fd 1 and 2, read by us (ChildProcess's stderr sink): the first `cap` bytes go to
// the log file, then one line saying the rest was cut; the last 16 KiB are kept in memory for error
// details either way. Task code cannot reach the file (it is outside the folder it may write), so
// printing costs it nothing but the pipe.
class CappedLog {
 public:
  void open(const std::string& path, std::size_t cap) {
    std::lock_guard<std::mutex> l(mu_);
    path_ = path;
    cap_ = cap;
    written_ = 0;
    cut_ = false;
    tail_.clear();
    out_.close();
    out_.clear();
    out_.open(path, std::ios::binary | std::ios::trunc);
  }
  void write(const char* data, std::size_t n) {
    std::lock_guard<std::mutex> l(mu_);
    tail_.append(data, n);
    if (tail_.size() > kTail) tail_.erase(0, tail_.size() - kTail);
    if (cut_) return;
    std::size_t room = cap_ > written_ ? cap_ - written_ : 0;
    std::size_t take = std::min(room, n);
    out_.write(data, static_cast<std::streamsize>(take));
    written_ += take;
    if (take < n) {
      cut_ = true;
      out_ << "\n[cuda-agent: the worker's output was cut here, at " << cap_ << " bytes]\n";
    }
    out_.flush();
  }
  // The last `max_bytes`, from the start of a line.
  std::string tail(std::size_t max_bytes) const {
    std::lock_guard<std::mutex> l(mu_);
    std::string text = tail_.size() > max_bytes ? tail_.substr(tail_.size() - max_bytes) : tail_;
    if (tail_.size() > max_bytes) {
      auto nl = text.find('\n');
      if (nl != std::string::npos) text.erase(0, nl + 1);
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }

 private:
  static constexpr std::size_t kTail = 16384;
  mutable std::mutex mu_;
  std::string path_, tail_;
  std::ofstream out_;
  std::size_t cap_ = 0, written_ = 0;
  bool cut_ = false;
};

// Resident set of one process in MiB, from /proc (0 when unknown).
std::size_t resident_mb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return static_cast<std::size_t>(std::atoll(line.c_str() + 6)) / 1024;
  return 0;
}

// Resident sets of every process in group `pgid`, in MiB: task code's children count too.
std::size_t group_resident_mb(pid_t pgid) {
  std::size_t kb = 0;
  DIR* d = opendir("/proc");
  if (!d) return resident_mb(pgid);
  const long page_kb = sysconf(_SC_PAGESIZE) / 1024;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string text;
    try {
      // istreambuf_iterator reads without a sentry, so a process that ends between the open and the
      // read (ESRCH from /proc) throws from libstdc++'s filebuf: that process is simply not counted.
      text.assign(std::istreambuf_iterator<char>(stat), std::istreambuf_iterator<char>());
    } catch (const std::exception&) {
      continue;
    }
    auto rp = text.rfind(')');
    if (rp == std::string::npos) continue;
    std::istringstream fields(text.substr(rp + 1));
    std::string state;
    long ppid = 0, pgrp = 0;
    fields >> state >> ppid >> pgrp;
    if (pgrp != pgid) continue;
    std::ifstream statm(std::string("/proc/") + e->d_name + "/statm");
    long size = 0, resident = 0;
    if (statm >> size >> resident) kb += static_cast<std::size_t>(resident * page_kb);
  }
  closedir(d);
  return kb / 1024;
}

// Bytes a folder holds (its files' blocks), in MiB: what task code wrote there is memory too when
// the folder is in /dev/shm. At most 100,000 entries are looked at.
std::size_t folder_mb(const std::string& dir) {
  std::error_code ec;
  std::size_t bytes = 0;
  int seen = 0;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end && seen < 100000; it.increment(ec), ++seen) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) bytes += static_cast<std::size_t>(st.st_blocks) * 512;
  }
  return bytes >> 20;
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

// The folders an interpreter imports from (sys.path with PYTHONPATH, its prefixes), asked once per
// interpreter and path. Run from "/", so the current folder is not among them.
std::vector<std::string> python_import_dirs(const std::string& python, const std::string& pythonpath) {
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto key = python + "\n" + pythonpath;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  SpawnOptions so;
  so.argv = {python, "-c",
             "import sys, json; sys.stdout.write(json.dumps([sys.prefix, sys.exec_prefix, sys.base_prefix, "
             "sys.base_exec_prefix] + sys.path))"};
  so.env_overrides = {{"PYTHONPATH", pythonpath}};
  so.working_dir = "/";
  std::vector<std::string> dirs;
  try {
    CommandResult r = run_command(so, "", seconds(60), 1 << 20);
    if (r.exit_status == 0)
      for (const auto& d : parse_json(r.out, "the interpreter's import path")) dirs.push_back(d.get<std::string>());
  } catch (const std::exception& e) {
    log::warn("reference worker: cannot ask ", python, " for its import path: ", e.what());
  }
  cache[key] = dirs;
  return dirs;
}

// A folder too broad to give task code: the root, or the home folder or one above it (a sys.path
// entry of "" or ~ would open the user's files).
bool too_broad(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(dir, ec);
  if (ec || p.empty() || p == "/" || !p.is_absolute()) return true;
  if (const char* home = std::getenv("HOME"); home && *home) {
    fs::path h = fs::weakly_canonical(home, ec);
    auto rel = h.lexically_relative(p);
    if (!rel.empty() && *rel.begin() != "..") return true;  // p is home or above it
  }
  return false;
}

// What task code may touch: libraries and the interpreter (read, execute), the few files of /etc,
// /proc and /sys that Python, torch and the CUDA driver read, the device files, its own folder.
TaskConfinement task_confinement(const WorkerOptions& opt, const std::string& python, const std::string& pythonpath,
                                 const std::string& io_dir, const std::vector<std::string>& cache_dirs) {
  TaskConfinement c;
  for (const char* d : {"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin"}) c.read_exec_dirs.push_back(d);
  std::vector<std::string> extra = python_import_dirs(python, pythonpath);
  std::stringstream pp(pythonpath);
  for (std::string d; std::getline(pp, d, ':');) extra.push_back(d);
  if (const char* ld = std::getenv("LD_LIBRARY_PATH"); ld && *ld) {
    std::stringstream ss(ld);
    for (std::string d; std::getline(ss, d, ':');) extra.push_back(d);
  }
  std::error_code ec;
  extra.push_back(fs::path(python).parent_path().string());
  for (auto& d : extra) {
    if (d.empty()) continue;
    if (too_broad(d)) {
      log::verbose("reference worker: not opening ", d, " to task code (too broad)");
      continue;
    }
    c.read_exec_dirs.push_back(d);
    auto real = fs::canonical(d, ec);
    if (!ec && real.string() != d) c.read_exec_dirs.push_back(real.string());
  }
  for (const char* f : {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime", "/etc/passwd",
                        "/etc/group", "/etc/nsswitch.conf", "/etc/os-release", "/etc/lsb-release", "/etc/mime.types",
                        "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/filesystems", "/proc/loadavg",
                        "/proc/devices", "/proc/modules", "/proc/sys/kernel", "/proc/sys/vm", "/proc/driver/nvidia",
                        "/sys"})
    c.read_paths.push_back(f);
  c.read_paths.insert(c.read_paths.end(), opt.read_dirs.begin(), opt.read_dirs.end());
  for (const char* f : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}) c.device_paths.push_back(f);
  const bool gpu = opt.device.rfind("cuda", 0) == 0;
  if (gpu) {
    glob_t g{};
    if (glob("/dev/nvidia*", 0, nullptr, &g) == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) c.device_paths.push_back(g.gl_pathv[i]);
    globfree(&g);
    // Task code writes only its own folder in /dev/shm, not the whole of it (host memory, and every
    // other worker's folder, which another client's task could tamper with): the worker shares
    // tensors by cuIpcGetMemHandle, which needs no file there (worker_confine_gpu passed so on the
    // H100: CUDA's start, IPC-kept tensors, eager and torch.compile timing, the filters).
    // CUDA_AGENT_WORKER_SHM=host gives back the whole folder, for a node whose driver needs it.
    const char* shm = std::getenv("CUDA_AGENT_WORKER_SHM");
    if (shm && std::string(shm) == "host") c.write_dirs.push_back("/dev/shm");
    c.allow_unix_sockets = true;         // the driver's own (MPS); Landlock scopes abstract ones
  }
  c.write_dirs.push_back(io_dir);
  c.write_dirs.insert(c.write_dirs.end(), cache_dirs.begin(), cache_dirs.end());
  c.write_dirs.insert(c.write_dirs.end(), opt.write_dirs.begin(), opt.write_dirs.end());
  // Tests whose hostile tasks leave marks for the test script (a counter, "busy") open their folder.
  if (const char* more = std::getenv("CUDA_AGENT_WORKER_WRITE_DIRS"); more && *more) {
    std::stringstream ss(more);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty() && !too_broad(d)) c.write_dirs.push_back(d);
  }
  return c;
}

// The environment variables task code inherits: the ones Python, torch, its thread pools, CUDA and
// the locale read, by name or prefix; no other (the tool's environment may hold secrets).
bool passed_to_task_code(const std::string& name) {
  if (name.rfind("CUDA_AGENT_", 0) == 0) return false;  // ours: a service's secret may be among them
  for (const char* exact : {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "LD_LIBRARY_PATH", "VIRTUAL_ENV",
                            "CONDA_PREFIX", "TERM"})
    if (name == exact) return true;
  for (const char* prefix : {"LC_", "PYTHON", "CUDA_", "NVIDIA_", "NV_", "TORCH", "PYTORCH_", "TRITON_", "OMP_", "KMP_",
                             "GOMP_", "MKL_", "OPENBLAS_", "CUBLAS_", "CUDNN_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

std::size_t worker_memory_share_mb(std::size_t total_mb, int workers) {
  if (workers < 1) workers = 1;
  if (total_mb == 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    std::size_t host_mb = pages > 0 && page > 0 ? (static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)) >> 20 : 65536;
    return std::max<std::size_t>(1, std::min<std::size_t>(16384, host_mb * 3 / 4 / static_cast<std::size_t>(workers)));
  }
  return std::max<std::size_t>(1, total_mb / static_cast<std::size_t>(workers));
}

struct WorkerClient::Impl {
  WorkerOptions opt;
  std::string python;
  PrivateTempDir tmp{"cuda-agent-worker"};
  std::unique_ptr<ChildProcess> child;
  Json hello;
  std::string log_path;
  std::string io_dir;  // temp_dir(): the one folder task code may write
  CappedLog log;
  int spawns = 0;
  int restarts = 0;
  int64_t next_id = 1;
  int64_t file_counter = 0;
  int polls = 0;
  std::map<std::string, Json> loads;  // task_id -> the last successful load request
  std::string code_key;               // one_task_per_process: the task code this process has run

  // One request with the load replay of a restarted worker (WorkerClient::request adds admission).
  Json send(const Json& req, milliseconds timeout);

  void make_io_dir() {
    io_dir = tmp.path() + "/io";
    std::error_code ec;
    fs::create_directories(io_dir + "/tmp", ec);
    fs::create_directories(io_dir + "/cache", ec);
    fs::permissions(io_dir, fs::perms::owner_all, ec);
    if (ec) throw EnvironmentError("cannot make the worker's folder " + io_dir + ": " + ec.message());
  }

  void start() {
    log_path = tmp.path() + "/worker-" + std::to_string(spawns) + ".log";
    log.open(log_path, opt.output_cap_bytes);
    std::string pythonpath = python_dir();
    if (const char* pp = std::getenv("PYTHONPATH"); pp && *pp) pythonpath += std::string(":") + pp;
    std::vector<std::string> cache_dirs;
    SpawnOptions so = spawn_options(pythonpath, cache_dirs);
    PreparedTaskConfinement prepared;
    add_confinement(so, pythonpath, cache_dirs, prepared);
    child = std::make_unique<ChildProcess>(so);
    child->set_stderr_sink([this](const char* data, std::size_t n) { log.write(data, n); });
    if (spawns++ > 0 && !fresh_start) ++restarts;
    fresh_start = false;
    code_key.clear();
    read_hello(prepared);
  }
  bool fresh_start = false;  // the next start() is one_task_per_process's, not a restart after a failure

  // one_task_per_process: a request that runs task code (load, filters) goes to a fresh worker when
  // this one has run other task code. What a task's code runs with is its code and init_inputs.
  std::optional<Json> isolate(const Json& req) {
    if (!opt.one_task_per_process) return std::nullopt;
    const std::string op = req.value("op", std::string());
    if (op != "load" && op != "filters") return std::nullopt;  // the ops that run task code (similarity only parses it)
    std::string key;
    for (const char* field : {"code", "code_file", "init_inputs"})
      if (req.contains(field)) key += std::string(field) + "=" + req[field].dump() + "\n";
    if (key.empty()) return std::nullopt;
    key = sha256_hex(key);
    if (child && !code_key.empty() && code_key != key) {
      stop();
      std::error_code ec;
      fs::remove(log_path, ec);  // its log: read by nobody now (a fresh one per task would pile up)
      // Nothing the last task left in the folder (caches, temp files, files named for later) reaches
      // the next: the folder is made anew.
      fs::remove_all(io_dir, ec);
      make_io_dir();
      fresh_start = true;  // the tasks it had loaded are loaded again when asked for (send's replay)
    }
    if (auto refused = ensure_running(req)) return refused;
    code_key = key;
    return std::nullopt;
  }

  bool on_gpu() const { return opt.device.rfind("cuda", 0) == 0; }

  // A worker to send `req` to: started (again) when there is none. A start refused for want of GPU
  // memory is the answer instead (error start_out_of_memory), for request()'s admission to retry.
  std::optional<Json> ensure_running(const Json& req) {
    if (child && child->running()) return std::nullopt;
    if (child) died(req, "worker_died", "the worker had exited");  // logs; the answer is for a later caller
    try {
      start();
    } catch (const StartOutOfMemory& e) {
      return failure(req, "start_out_of_memory", e.what());
    }
    return std::nullopt;
  }

  // The worker's command line and environment; `cache_dirs` gets the cache folders the user named.
  SpawnOptions spawn_options(const std::string& pythonpath, std::vector<std::string>& cache_dirs) {
    char cpu[64];
    std::snprintf(cpu, sizeof cpu, "%.3f", opt.cpu_seconds_limit);
    SpawnOptions so;
    so.argv = {python,      "-u",  "-m",     "cuda_agent_worker", "--device", opt.device, "--cpu-seconds", cpu,
               "--memory-mb", std::to_string(opt.memory_limit_mb), "--work-dir", tmp.path(), "--io-dir", io_dir,
               "--parent-pid", std::to_string(getpid())};
    // Every cache and temp file of Python, torch, inductor, Triton and the CUDA driver goes to the
    // worker's own folder; a cache folder the user named is kept, and opened to task code.
    so.env_overrides = {{"PYTHONPATH", pythonpath}, {"PYTHONDONTWRITEBYTECODE", "1"}, {"PYTHONUNBUFFERED", "1"},
                        {"PYTHONSAFEPATH", "1"},    {"TMPDIR", io_dir + "/tmp"},     {"XDG_CACHE_HOME", io_dir + "/cache"},
                        {"TRITON_HOME", io_dir + "/cache"}, {"CUDA_CACHE_PATH", io_dir + "/cache/nv"},
                        {"MPLCONFIGDIR", io_dir + "/cache/mpl"}};
    for (const char* var : {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}) {
      // One task per process: no cache another task wrote (a Triton or inductor entry keyed by a
      // kernel another task also makes would be that task's code in this one's compile).
      const char* v = opt.one_task_per_process ? nullptr : std::getenv(var);
      if (v && *v) {
        std::error_code ec;
        fs::create_directories(v, ec);
        cache_dirs.push_back(v);
      } else {
        so.env_overrides[var] = io_dir + "/cache/" + (var[0] == 'T' && var[1] == 'O' ? "inductor" : "triton");
      }
    }
    // Inductor's pool of compile processes would start in new sessions; one thread instead.
    if (!std::getenv("TORCHINDUCTOR_COMPILE_THREADS")) so.env_overrides["TORCHINDUCTOR_COMPILE_THREADS"] = "1";
    // Task code sees only the environment Python, torch and CUDA read: the tool's own variables
    // (a service's shared secret, credentials, tokens) stay with the tool.
    so.clear_env = true;
    for (char** e = environ; *e; ++e) {
      std::string entry = *e;
      auto eq = entry.find('=');
      if (eq == std::string::npos) continue;
      std::string name = entry.substr(0, eq);
      if (passed_to_task_code(name) && !so.env_overrides.count(name)) so.env_overrides[name] = entry.substr(eq + 1);
    }
    so.working_dir = io_dir;
    so.capture_stderr = true;
    so.end_group_on_exit = true;
    return so;
  }

  // Confinement (landlock, seccomp, file size), prepared here and passed to the worker, unless
  // opt.confine is false or CUDA_AGENT_WORKER_CONFINE=off.
  void add_confinement(SpawnOptions& so, const std::string& pythonpath, const std::vector<std::string>& cache_dirs,
                       PreparedTaskConfinement& prepared) {
    const char* env_confine = std::getenv("CUDA_AGENT_WORKER_CONFINE");
    const std::string skip = env_confine && *env_confine && std::string(env_confine) != "on" ? env_confine : "";
    const bool confine = opt.confine && skip != "off";
    namespaces = false;
    if (!confine) {
      so.argv.push_back("--unconfined");
      return;
    }
    const TaskConfinement tc = task_confinement(opt, python, pythonpath, io_dir, cache_dirs);
    prepare_task_confinement(tc, &prepared);
    so.argv.insert(so.argv.end(), {"--file-mb", std::to_string(opt.memory_limit_mb)});
    std::string skip_list = skip;
    if (prepared.landlock_fd >= 0 && skip.find("landlock") == std::string::npos) {
      so.pass_fds.push_back({prepared.landlock_fd, 3});
      so.argv.insert(so.argv.end(), {"--landlock-fd", "3"});
    } else if (skip.find("namespaces") == std::string::npos) {
      // No Landlock (or told to do without): the filesystem through namespaces, where the node allows them.
      std::string why;
      if (namespace_sandbox_available(&why)) {
        const std::string root = tmp.path() + "/root";
        std::error_code ec;
        fs::create_directories(root, ec);
        so.argv = namespace_sandbox_argv(tc, root, tmp.path(), so.argv);
        namespaces = true;
        if (log::level() >= log::kVerbose) {
          std::string shown;
          for (const auto& a : so.argv) shown += " " + a;
          log::verbose("reference worker: namespace sandbox:", shown);
        }
        std::erase_if(prepared.warnings, [](const std::string& w) { return w.rfind("landlock", 0) == 0; });
        if (skip_list.find("landlock") == std::string::npos) skip_list += skip_list.empty() ? "landlock" : ",landlock";
      } else {
        prepared.warnings.push_back("namespaces: " + why + ": task code can read and write every file the tool can");
      }
    }
    if (!prepared.seccomp_hex.empty()) so.argv.insert(so.argv.end(), {"--seccomp", prepared.seccomp_hex});
    if (!skip_list.empty()) so.argv.insert(so.argv.end(), {"--confine-skip", skip_list});  // e.g. "caps" or "landlock,seccomp"
  }
  bool namespaces = false;  // the worker runs in the namespace sandbox (namespace_sandbox.hpp)

  // The worker's hello: it started, what confines it; an EnvironmentError (with its log's end) when not.
  void read_hello(const PreparedTaskConfinement& prepared) {
    auto line = child->read_line(opt.start_timeout);
    child->drain_stderr();
    std::string tail = log.tail(2000);
    if (!line) {
      child->kill();
      std::string status = child->status_text();
      child.reset();
      std::string msg = "the reference worker (" + python + " -m cuda_agent_worker) did not start" +
                        (status.empty() ? " within the start timeout" : ": " + status) +
                        (tail.empty() ? "" : "; its log ends:\n" + tail);
      if (on_gpu() && says_out_of_memory(tail)) throw StartOutOfMemory(msg);
      throw EnvironmentError(msg);
    }
    Json h;
    try {
      h = parse_json(*line, "reference worker hello");
    } catch (const std::exception&) {
      child->kill();
      child.reset();
      throw EnvironmentError("the reference worker answered something that is not JSON: " + line->substr(0, 200));
    }
    if (!h.value("ok", false)) {
      child->kill();
      child.reset();
      std::string err = h.value("error", "?");
      std::string msg = "reference worker: " + err + ": " + h.value("detail", std::string(""));
      if (on_gpu() && err == "out_of_memory") throw StartOutOfMemory(msg);
      throw EnvironmentError(msg);
    }
    // What the client itself holds the worker to.
    if (!h.contains("confinement") || !h["confinement"].is_array()) h["confinement"] = Json::array();
    for (const char* piece : {"pgroup", "output-cap", "memory-watch"}) h["confinement"].push_back(piece);
    if (opt.one_task_per_process) h["confinement"].push_back("one-task-per-process");
    if (namespaces) h["confinement"].push_back("namespaces");
    for (const auto& w : prepared.warnings) h["confinement_warnings"].push_back(w);
    if (h.contains("confinement_warnings") && spawns == 1)
      for (const auto& w : h["confinement_warnings"])
        log::warn("reference worker: confinement: ", w.is_string() ? w.get<std::string>() : w.dump());
    hello = std::move(h);
    log::verbose("reference worker started: pid ", hello.value("pid", -1), ", torch ",
                 hello.value("torch_version", std::string("?")), ", ", opt.device, ", ", python, ", confinement ",
                 hello["confinement"].dump());
  }

  // Over the memory limit: the worker's process group's resident sets and what its folder holds.
  // The whole group and the folder every 5th call (a /proc scan), the worker alone otherwise.
  std::optional<std::string> over_memory(bool full) {
    if (opt.memory_limit_mb == 0 || !child) return std::nullopt;
    std::size_t rss = full ? group_resident_mb(child->pid()) : resident_mb(child->pid());
    std::size_t files = full ? folder_mb(io_dir) : 0;
    if (rss + files <= opt.memory_limit_mb) return std::nullopt;
    return "the worker's processes hold " + std::to_string(rss) + " MiB resident" +
           (files ? " and its folder " + std::to_string(files) + " MiB" : std::string()) + ", over the limit of " +
           std::to_string(opt.memory_limit_mb) + " MiB; worker killed";
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
    if (child) child->drain_stderr();
    std::string tail = log.tail(1500);
    std::string detail = why + (status.empty() ? "" : " (" + status + ")") + (tail.empty() ? "" : "; log: " + tail);
    log::warn("reference worker: ", why, status.empty() ? "" : " (" + status + ")", "; restarting it");
    return failure(req, error, detail);
  }

  Json exchange(Json req, milliseconds timeout) {
    if (auto refused = isolate(req)) return *refused;
    if (auto refused = ensure_running(req)) return *refused;
    // Task code may have kept running between requests (a thread of its own).
    if (auto over = over_memory(true)) return died(req, "memory_limit", *over);
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
          a = parse_json(*line, "reference worker answer");
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
      if (auto over = over_memory(++polls % 5 == 0)) return died(req, "memory_limit", *over);
    }
  }
};

WorkerClient::WorkerClient(WorkerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  if (impl_->opt.memory_limit_mb == 0) impl_->opt.memory_limit_mb = worker_memory_share_mb(0, 1);
  impl_->python = impl_->opt.python.empty() ? find_python() : impl_->opt.python;
  impl_->make_io_dir();
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
  if (a.value("error", std::string()) == "start_out_of_memory") return true;
  return says_out_of_memory(a.value("detail", std::string()) + "\n" + a.value("traceback", std::string()));
}

}  // namespace

bool out_of_memory_alone(const Json& answer) {
  return answer.is_object() && answer.value("memory_admission", std::string()) == "alone" && out_of_memory(answer);
}

Json WorkerClient::request(const Json& request, milliseconds timeout) {
  if (!request.is_object() || !request.contains("op"))
    throw InternalError("WorkerClient::request: a request is an object with \"op\"");
  Json req = request;
  req.erase("id");
  const std::string op = req.value("op", std::string());
  if (!impl_->on_gpu()) return impl_->send(req, timeout);
  MemoryGate& gate = memory_gate(impl_->opt.device);
  if (allocates_on_gpu(op)) {
    std::shared_lock<MemoryGate> running(gate);
    Json a = impl_->send(req, timeout);
    if (!out_of_memory(a)) return a;
  } else {  // outside the gate; only a worker (re)started for it can want memory
    Json a = impl_->send(req, timeout);
    if (a.value("error", std::string()) != "start_out_of_memory") return a;
  }
  log::verbose("reference worker: ", op, " ran out of GPU memory; waiting to run it alone on ", impl_->opt.device);
  std::unique_lock<MemoryGate> alone(gate);
  impl_->exchange(request::release({}, /*empty_cache=*/true), timeout);
  Json a = impl_->send(req, timeout);
  // No worker of this process runs a request now: a context that still cannot be made says the
  // device's memory is held outside this run (another job on the GPU). Every task would fail the
  // same way, so the run stops (exit 3) instead of judging them all.
  if (a.value("error", std::string()) == "start_out_of_memory")
    throw EnvironmentError("no GPU memory on " + impl_->opt.device +
                           " for a reference worker even with no other request of this run on it: " +
                           a.value("detail", std::string()));
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

const std::string& WorkerClient::temp_dir() const { return impl_->io_dir; }
std::string WorkerClient::log_tail(std::size_t max_bytes) const { return impl_->log.tail(max_bytes); }

std::string WorkerClient::temp_path(const std::string& stem) {
  return impl_->io_dir + "/" + stem + "-" + std::to_string(impl_->file_counter++) + ".safetensors";
}

std::string WorkerClient::python() const { return impl_->python; }
const Json& WorkerClient::hello() const { return impl_->hello; }
Json WorkerClient::confinement() const {
  const Json& h = impl_->hello;
  auto list = [&](const char* key) { return h.is_object() && h.contains(key) && h[key].is_array() ? Json(h[key]) : Json::array(); };
  return Json{{"applied", list("confinement")}, {"warnings", list("confinement_warnings")}};
}
int WorkerClient::restarts() const { return impl_->restarts; }
int WorkerClient::spawns() const { return impl_->spawns; }
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
  Json a = worker.request(request::inputs(task_id, seed, keys.inputs));
  if (!a.value("ok", false)) {
    t.failed = "inputs";
    t.answer = std::move(a);
    return t;
  }
  t.inputs = std::move(a["tensors"]);
  Json b = worker.request(request::reference(task_id, keys.inputs, keys.reference, keys.params));
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

}  // namespace ca::worker
