// Child process handling with fork/exec, pipes and poll.
#include "libcommon/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "libcommon/errors.hpp"
#include "libcommon/signals.hpp"

extern char** environ;

namespace ca {
namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + (strsignal(sig) ? strsignal(sig) : "?") + ")";
  }
  return "status " + std::to_string(status);
}

int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// The live descendants of `pid` (read from /proc/PID/task/*/children), each held by a pidfd so it
// can be signalled and waited on after it is reparented. A process that left the group (setsid, as
// bwrap's --new-session does) is reached this way, and so is a pid namespace's init, whose exit
// comes only after every process in its namespace has gone.
std::vector<int> descendant_pidfds(pid_t pid) {
  std::vector<int> fds;
  std::deque<pid_t> todo{pid};  // breadth first
  // At most 256 held at once: fds are shared by every thread of the process (a sandboxed fork bomb
  // must not make another lane's open() fail). The first taken are the nearest: bwrap's pid
  // namespace init is its direct child, and its end is the end of everything inside.
  while (!todo.empty() && fds.size() < 256) {
    pid_t p = todo.front();
    todo.pop_front();
    const std::string tasks = "/proc/" + std::to_string(p) + "/task";
    DIR* d = opendir(tasks.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(tasks + "/" + e->d_name + "/children");
      pid_t c;
      while (fds.size() < 256 && in >> c) {
        int fd = static_cast<int>(syscall(SYS_pidfd_open, c, 0));
        if (fd < 0) continue;
        fds.push_back(fd);
        todo.push_back(c);
      }
    }
    closedir(d);
  }
  return fds;
}

// SIGKILL to each, then wait (at most `bound`) until each has exited; the fds are closed.
void kill_and_wait(std::vector<int>& fds, std::chrono::milliseconds bound) {
  for (int fd : fds) syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
  auto deadline = std::chrono::steady_clock::now() + bound;
  for (int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) != 0 || errno != EINTR) break;
    }
    ::close(fd);
  }
  fds.clear();
}

}  // namespace

ChildProcess::ChildProcess(const SpawnOptions& options) {
  if (options.argv.empty()) throw InternalError("spawn: empty argv");
  int in_pipe[2], out_pipe[2], err_pipe[2] = {-1, -1};
  if (pipe2(in_pipe, O_CLOEXEC) || pipe2(out_pipe, O_CLOEXEC)) throw EnvironmentError("pipe failed");
  if (options.capture_stderr && pipe2(err_pipe, O_CLOEXEC)) throw EnvironmentError("pipe failed");
  // Build argv/envp before fork: the child only calls async-signal-safe functions.
  std::vector<char*> argv;
  for (auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; !options.clear_env && *e; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq != std::string::npos && options.env_overrides.count(entry.substr(0, eq))) continue;
    env_strings.push_back(entry);
  }
  for (auto& [k, v] : options.env_overrides) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int exec_error[2];
  if (pipe2(exec_error, O_CLOEXEC)) throw EnvironmentError("pipe failed");

  const pid_t parent = getpid();
  pid_t pid;
  try {
    // Registered with the signal path, which stops and reaps it on SIGINT/SIGTERM.
    pid = signals::fork_child(options.new_process_group, options.argv[0]);
  } catch (...) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_error[0], exec_error[1]})
      if (fd >= 0) ::close(fd);
    throw;
  }
  if (pid < 0) throw EnvironmentError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    if (options.new_process_group) setpgid(0, 0);
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the parent died before the prctl
    }
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    if (options.capture_stderr) dup2(err_pipe[1], 2);
    for (const auto& [ours, theirs] : options.pass_fds) {
      if (ours == theirs) fcntl(ours, F_SETFD, 0);
      else dup2(ours, theirs);
    }
    if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) {
      int e = errno;
      (void)!::write(exec_error[1], &e, sizeof e);
      _exit(127);
    }
    execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!::write(exec_error[1], &e, sizeof e);
    _exit(127);
  }
  ::close(exec_error[1]);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (options.capture_stderr) ::close(err_pipe[1]);
  int child_errno = 0;
  ssize_t n = ::read(exec_error[0], &child_errno, sizeof child_errno);
  ::close(exec_error[0]);
  pid_ = pid;
  stdin_fd_ = in_pipe[1];
  stdout_fd_ = out_pipe[0];
  stderr_fd_ = options.capture_stderr ? err_pipe[0] : -1;
  end_group_on_exit_ = options.end_group_on_exit && options.new_process_group;
  if (n == sizeof child_errno) {
    wait(std::chrono::milliseconds(1000));
    reset();
    throw EnvironmentError("cannot run '" + options.argv[0] + "': " + std::strerror(child_errno));
  }
  signal(SIGPIPE, SIG_IGN);  // a dead child must give an error on write, not kill us
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) kill();
  reset();
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept { *this = std::move(o); }

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0) kill();
    reset();
    pid_ = o.pid_;
    stdin_fd_ = o.stdin_fd_;
    stdout_fd_ = o.stdout_fd_;
    stderr_fd_ = o.stderr_fd_;
    out_buffer_ = std::move(o.out_buffer_);
    eof_ = o.eof_;
    stderr_sink_ = std::move(o.stderr_sink_);
    end_group_on_exit_ = o.end_group_on_exit_;
    exit_status_ = o.exit_status_;
    term_signal_ = o.term_signal_;
    status_text_ = std::move(o.status_text_);
    o.pid_ = -1;
    o.stdin_fd_ = o.stdout_fd_ = o.stderr_fd_ = -1;
  }
  return *this;
}

void ChildProcess::reset() {
  for (int* fd : {&stdin_fd_, &stdout_fd_, &stderr_fd_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

void ChildProcess::record_exit(int wait_status) {
  signals::forget_child(pid_);
  exit_status_ = code_of(wait_status);
  term_signal_ = WIFSIGNALED(wait_status) ? std::optional<int>(WTERMSIG(wait_status)) : std::nullopt;
  status_text_ = describe_status(wait_status);
  pid_ = -1;
}

bool ChildProcess::reap(bool block) {
  if (end_group_on_exit_) {
    // Seen exited but not yet reaped: its zombie keeps the group id from being reused, so the
    // SIGKILL reaches only what it left behind.
    siginfo_t info{};
    int r = waitid(P_PID, id_t(pid_), &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
    if (r != 0 || info.si_pid != pid_) return false;
    ::kill(-pid_, SIGKILL);
  }
  int status;
  pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r == pid_) {
    record_exit(status);
    return true;
  }
  return false;
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  return !reap(false);
}

bool ChildProcess::write(const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(stdin_fd_, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void ChildProcess::close_stdin() {
  if (stdin_fd_ >= 0) {
    ::close(stdin_fd_);
    stdin_fd_ = -1;
  }
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = out_buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_buffer_.substr(0, nl);
      out_buffer_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || stdout_fd_ < 0) {
      if (out_buffer_.empty()) return std::nullopt;
      std::string rest;
      rest.swap(out_buffer_);
      return rest;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd pfd[2] = {{stdout_fd_, POLLIN, 0}, {stderr_fd_, POLLIN, 0}};
    const bool with_stderr = stderr_sink_ && stderr_fd_ >= 0;
    int r = poll(pfd, with_stderr ? 2 : 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (r <= 0) continue;
    if (with_stderr && pfd[1].revents) read_stderr_into_sink();
    if (!pfd[0].revents) continue;
    char buf[65536];
    ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof_ = true;
      continue;
    }
    out_buffer_.append(buf, static_cast<std::size_t>(n));
  }
}

bool ChildProcess::read_stderr_into_sink() {
  char buf[65536];
  ssize_t n = ::read(stderr_fd_, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    ::close(stderr_fd_);
    stderr_fd_ = -1;
    return false;
  }
  stderr_sink_(buf, static_cast<std::size_t>(n));
  return true;
}

std::string ChildProcess::drain_stderr() {
  std::string out;
  if (stderr_fd_ < 0) return out;
  if (stderr_sink_) {
    for (int i = 0; i < 4096 && stderr_fd_ >= 0; ++i) {  // bounded: a child writing without end
      pollfd pfd{stderr_fd_, POLLIN, 0};
      if (poll(&pfd, 1, 0) <= 0 || !read_stderr_into_sink()) break;
    }
    return out;
  }
  for (;;) {
    pollfd pfd{stderr_fd_, POLLIN, 0};
    if (poll(&pfd, 1, 0) <= 0) break;
    char buf[8192];
    ssize_t n = ::read(stderr_fd_, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

void ChildProcess::kill() {
  if (pid_ <= 0) return;
  // Its descendants first, while they are still its: once it is dead they belong to init.
  std::vector<int> descendants = descendant_pidfds(pid_);
  ::kill(-pid_, SIGKILL);  // the whole group: a hung child's own children go too
  ::kill(pid_, SIGKILL);
  if (!reap(true)) signals::forget_child(pid_);  // reaped by the signal path
  pid_ = -1;
  // Those that left the group, and the end of them all: nothing the child started is still
  // writing when kill() returns (a sandbox's workspace is measured and trimmed right after).
  kill_and_wait(descendants, std::chrono::seconds(5));
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return exit_status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (reap(false)) return exit_status_;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

CommandResult run_command(const SpawnOptions& options, const std::string& stdin_text, std::chrono::milliseconds timeout,
                          std::size_t output_cap, const StopCheck& stop, std::chrono::milliseconds stop_grace) {
  SpawnOptions opts = options;
  opts.capture_stderr = true;
  ChildProcess child(opts);
  CommandResult result;
  // Feed stdin from a thread so a child that writes before reading cannot deadlock us.
  std::thread feeder([&] {
    child.write(stdin_text);
    child.close_stdin();
  });
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int out_fd = -1;
  (void)out_fd;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      child.kill();
      break;
    }
    if (stop && stop()) {
      result.stopped = true;
      if (child.pid() > 0) {
        // The descendants are taken before the SIGTERM, which may end the child at once.
        std::vector<int> descendants = descendant_pidfds(child.pid());
        ::kill(-child.pid(), SIGTERM);
        if (!child.wait(stop_grace)) child.kill();  // SIGKILL to the whole group and its descendants
        kill_and_wait(descendants, std::chrono::seconds(5));
      }
      break;
    }
    auto line = child.read_line(std::min(left, std::chrono::milliseconds(50)));
    if (line) {
      if (result.out.size() < output_cap) result.out += *line + "\n";
    }
    std::string err = child.drain_stderr();
    if (result.err.size() < output_cap) result.err += err;
    if (child.eof()) {
      // stdout closed: collect the rest of stderr and the exit status.
      auto st = child.wait(std::max(std::chrono::milliseconds(1), left));
      std::string rest = child.drain_stderr();
      if (result.err.size() < output_cap) result.err += rest;
      if (!st) {
        result.timed_out = true;
        child.kill();
      }
      break;
    }
  }
  // A partial last line without '\n' is still output.
  while (auto line = child.read_line(std::chrono::milliseconds(0))) result.out += *line + "\n";
  feeder.join();
  auto st = child.wait(std::chrono::milliseconds(0));
  result.exit_status = st ? *st : -1;
  result.term_signal = st ? child.term_signal().value_or(0) : 0;
  if (result.out.size() > output_cap) result.out.resize(output_cap);
  if (result.err.size() > output_cap) result.err.resize(output_cap);
  return result;
}

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace ca
