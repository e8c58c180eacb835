// Child processes with pipes: long-lived line-protocol children (the reference worker, kernel-check's
// per-GPU runner) and one-shot commands, with timeouts that kill the whole process group.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ca {

struct SpawnOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env_overrides;  // added to (or replacing in) the environment
  bool clear_env = false;                            // start from an empty environment (overrides only)
  std::string working_dir;
  bool capture_stderr = false;  // default: the child's stderr goes to ours
  bool new_process_group = true;
  // The child gets SIGTERM when the thread that started it dies (PR_SET_PDEATHSIG): a kill -9 of us
  // does not leave it running. Only for children waited on by the thread that spawns them.
  bool die_with_parent = false;
  // Descriptors the child keeps: {ours, its number} (ours may be close-on-exec).
  std::vector<std::pair<int, int>> pass_fds;
  // When the child exits, what is left of its process group is killed before it is reaped (while
  // its zombie still holds the group's id): nothing it started outlives it, even when it exits on
  // its own. For children whose whole group is theirs (the reference worker).
  bool end_group_on_exit = false;
};

class ChildProcess {
 public:
  ChildProcess() = default;
  explicit ChildProcess(const SpawnOptions& options);  // throws EnvironmentError if exec fails
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;

  bool running();
  pid_t pid() const { return pid_; }
  // Writes all of `data` to the child's stdin; false if the child is gone.
  bool write(const std::string& data);
  void close_stdin();
  // Reads one line (without '\n') from stdout; nullopt on timeout or EOF (see eof()).
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  bool eof() const { return eof_; }
  // Whatever stderr text has arrived (capture_stderr only), drained without blocking.
  std::string drain_stderr();
  // With a sink, read_line() also reads stderr as it arrives and hands it over (so a chatty child
  // never blocks on a full pipe while we wait for its answer); drain_stderr() feeds it too.
  void set_stderr_sink(std::function<void(const char*, std::size_t)> sink) { stderr_sink_ = std::move(sink); }
  // SIGKILL to the process group, then reap. Returns the wait status description.
  void kill();
  // Wait up to `timeout` for exit; returns the exit status (or 128+signal) or nullopt. The number
  // alone does not say how it ended (an exit(137) and a SIGKILL both give 137): term_signal() does.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // The signal that ended the reaped child, read from its wait status (WIFSIGNALED, WTERMSIG);
  // nullopt when it exited by itself, whatever its code, or has not been reaped here.
  std::optional<int> term_signal() const { return term_signal_; }
  // "exit 3", "killed by signal 9 (SIGKILL)"
  std::string status_text() const { return status_text_; }

 private:
  void reset();
  void record_exit(int wait_status);  // the reaped child's status, and forget its pid
  bool reap(bool block);              // waits (or polls) for the exit; true once reaped
  bool read_stderr_into_sink();       // false at EOF
  std::function<void(const char*, std::size_t)> stderr_sink_;
  bool end_group_on_exit_ = false;
  pid_t pid_ = -1;
  int stdin_fd_ = -1, stdout_fd_ = -1, stderr_fd_ = -1;
  std::string out_buffer_;
  bool eof_ = false;
  std::optional<int> exit_status_;
  std::optional<int> term_signal_;
  std::string status_text_;
};

struct CommandResult {
  int exit_status = -1;  // 128+signal when killed
  int term_signal = 0;   // the signal that ended it (its wait status), 0 when it exited by itself
  bool timed_out = false;
  bool stopped = false;  // `stop` asked for it to end
  std::string out, err;
};

// Asked about every 50 ms while a command runs; true ends it (an interrupt, a limit of the caller's).
using StopCheck = std::function<bool()>;

// Runs a command to completion with stdin text, a timeout and an output cap (bytes per stream).
// When `stop` says so, the process group gets SIGTERM (so a child can stop its own workers), and
// SIGKILL after `stop_grace`.
CommandResult run_command(const SpawnOptions& options, const std::string& stdin_text,
                          std::chrono::milliseconds timeout, std::size_t output_cap = 1 << 20,
                          const StopCheck& stop = nullptr,
                          std::chrono::milliseconds stop_grace = std::chrono::milliseconds(2000));

// The first executable of that name on PATH, or empty.
std::string find_on_path(const std::string& name);

}  // namespace ca
