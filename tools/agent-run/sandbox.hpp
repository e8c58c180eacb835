// The bash tool's sandbox: bubblewrap with the workspace read-write at /workspace, system folders
// read-only, a private /tmp (a folder beside the workspace, on disk and under its cap), no network,
// and rlimits on CPU time, memory, processes and file size; output is cut inside the sandbox and a
// wall clock kills everything it started. A watch (an interrupt, the workspace cap) can end it too.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tools/agent-run/agent.hpp"

namespace ca::agent_run {

struct SandboxResult {
  int exit_status = -1;       // of the command (128+signal when killed by a signal)
  bool timed_out = false;     // the wall-clock limit ended it
  bool output_truncated = false;
  bool sandbox_failed = false;  // bwrap itself could not start the sandbox
  std::string stopped;          // why the watch ended it ("" when it did not)
  std::string refused;          // why the command was not started ("" when it was): too long to exec
  std::string output;         // stdout and stderr together, at most limits.output_bytes
  double elapsed_ms = 0;
  // One line for the model and the record: what ended the command and which limit, if any.
  std::string report(const SandboxLimits& limits) const;
};

// Asked every 50 ms while a command runs: "" to go on, else why it must end now.
using SandboxWatch = std::function<std::string()>;

class Sandbox {
 public:
  // `workspace`: host directory bound at /workspace; `tmp`: bound at /tmp. `uid` > 0: when running as
  // root, the command runs as that uid (so RLIMIT_NPROC holds: root is exempt from it); the workspace
  // is handed to it. Never uid 0: the caller validates (--sandbox-uid).
  Sandbox(std::string workspace, std::string tmp, SandboxLimits limits, int uid);
  SandboxResult run_shell(const std::string& command, const SandboxWatch& watch = nullptr) const;  // bash -c COMMAND
  SandboxResult run_argv(const std::vector<std::string>& argv, const SandboxWatch& watch = nullptr) const;
  const SandboxLimits& limits() const { return limits_; }
  // "" when bubblewrap works here, else why not (checked once per process).
  static std::string availability();

 private:
  std::vector<std::string> bwrap_prefix() const;
  SandboxResult run(const std::vector<std::string>& inner_argv, const SandboxWatch& watch) const;
  std::string workspace_, tmp_;
  SandboxLimits limits_;
  int uid_;
};

}  // namespace ca::agent_run
