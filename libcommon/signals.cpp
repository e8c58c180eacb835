// The shared signal path: a self-pipe written by the handler and one thread that stops the
// children, removes the temp dirs, closes the run rows and ends the process.
#include "libcommon/signals.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"

namespace ca::signals {
namespace {

struct State {
  std::mutex mutex;  // guards what follows; held across fork() in fork_child
  std::map<pid_t, bool> children;  // pid -> leads its own process group
  std::set<std::string> temp_dirs;
  std::map<int, std::function<void(int)>> cleanups;
  int next_cleanup = 1;
  std::function<void(int)> graceful;
};

// Never destroyed: the signal thread may still use it while main() returns.
State& state() {
  static State* s = new State;
  return *s;
}

std::atomic<int> g_received{0};
std::atomic<bool> g_stopping{false};
std::atomic<int> g_delivered{0};
int g_pipe[2] = {-1, -1};
std::once_flag g_installed;

extern "C" void on_signal(int sig) {
  // Async-signal-safe only: a third signal while the clean stop hangs ends the process at once.
  if (g_delivered.fetch_add(1) >= 2) _exit(128 + sig);
  unsigned char byte = static_cast<unsigned char>(sig);
  int saved = errno;
  (void)!::write(g_pipe[1], &byte, 1);
  errno = saved;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "signal " + std::to_string(sig);
  }
}

// SIGTERM to every child's group, 2 s to go, then SIGKILL; every one reaped.
void stop_children(const std::map<pid_t, bool>& children) {
  auto signal_all = [&](int sig) {
    for (const auto& [pid, group] : children) {
      if (group) ::kill(-pid, sig);
      ::kill(pid, sig);
    }
  };
  signal_all(SIGTERM);
  std::set<pid_t> left;
  for (const auto& [pid, group] : children) left.insert(pid);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto it = left.begin(); it != left.end();) {
      int status;
      pid_t r = waitpid(*it, &status, WNOHANG);
      // ECHILD: its owner reaped it first.
      if (r == *it || (r < 0 && errno == ECHILD)) it = left.erase(it);
      else ++it;
    }
    if (!left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The groups once more: a child's own children (compile workers) may outlive it.
  signal_all(SIGKILL);
  for (pid_t pid : left) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

[[noreturn]] void end_process(int sig) {
  State& s = state();
  std::map<pid_t, bool> children;
  std::set<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    g_stopping = true;  // from here on no child is started
    children = s.children;
  }
  const int code = 128 + sig;
  log::warn("interrupted by ", signal_name(sig), ": stopping ", children.size(), " child process",
            children.size() == 1 ? "" : "es", ", exit ", code);
  stop_children(children);
  run_cleanups(code);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    dirs = s.temp_dirs;
  }
  for (const auto& dir : dirs) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  // Not in the middle of a record line (a writer blocked on a full pipe gets 2 s).
  (void)output_mutex().try_lock_for(std::chrono::seconds(2));
  _exit(code);
}

void watch() {
  for (;;) {
    unsigned char byte = 0;
    ssize_t n = ::read(g_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    int sig = byte;
    int expected = 0;
    bool first = g_received.compare_exchange_strong(expected, sig);
    std::function<void(int)> graceful;
    {
      std::lock_guard<std::mutex> lock(state().mutex);
      graceful = state().graceful;
    }
    if (first && graceful) {
      log::warn("interrupted by ", signal_name(sig), ": finishing the work in flight (again to stop at once)");
      graceful(sig);
      continue;
    }
    end_process(sig);
  }
}

}  // namespace

void install() {
  std::call_once(g_installed, [] {
    if (pipe2(g_pipe, O_CLOEXEC) != 0) throw EnvironmentError("pipe failed");
    std::thread(watch).detach();
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      // Ignored on entry stays ignored: `nohup tool &`, and SIGINT for a shell's background jobs.
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      sigaction(sig, &sa, nullptr);
    }
  });
}

int received() { return g_received.load(); }
bool stopping() { return g_stopping.load(); }

void set_graceful_handler(std::function<void(int)> handler) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().graceful = std::move(handler);
}

pid_t fork_child(bool own_process_group, const std::string& what) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (g_stopping) throw EnvironmentError("interrupted: not starting " + what);
  pid_t pid = fork();
  if (pid > 0) {
    // Also here, not only in the child: a kill of the group right after fork must reach it.
    if (own_process_group) setpgid(pid, pid);
    s.children[pid] = own_process_group;
  }
  return pid;
}

void forget_child(pid_t pid) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().children.erase(pid);
}

void add_temp_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().temp_dirs.insert(path);
}

void remove_temp_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().temp_dirs.erase(path);
}

int add_cleanup(std::function<void(int)> cleanup) {
  std::lock_guard<std::mutex> lock(state().mutex);
  int id = state().next_cleanup++;
  state().cleanups[id] = std::move(cleanup);
  return id;
}

void remove_cleanup(int id) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().cleanups.erase(id);
}

void run_cleanups(int exit_code) {
  std::map<int, std::function<void(int)>> cleanups;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    cleanups = state().cleanups;
  }
  for (auto& [id, cleanup] : cleanups) {
    try {
      cleanup(exit_code);
    } catch (const std::exception& e) {
      log::warn("at exit: ", e.what());
    }
  }
}

std::timed_mutex& output_mutex() {
  static std::timed_mutex* m = new std::timed_mutex;
  return *m;
}

void wait_if_stopping() {
  if (!g_stopping) return;
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace ca::signals
