// The bash tool's sandbox: bubblewrap with the workspace read-write at /workspace, system folders
// read-only, a private /tmp, no network, and rlimits on CPU time, memory, processes and file size;
// output is cut inside the sandbox and a wall clock kills everything it started.
#pragma once
#include <string>
#include <vector>

#include "tools/agent-run/agent.hpp"

namespace ca::agent {

struct SandboxResult {
  int exit_status = -1;       // of the command (128+signal when killed by a signal)
  bool timed_out = false;     // the wall-clock limit ended it
  bool output_truncated = false;
  bool sandbox_failed = false;  // bwrap itself could not start the sandbox
  std::string output;         // stdout and stderr together, at most limits.output_bytes
  double elapsed_ms = 0;
  // One line for the model and the record: what ended the command and which limit, if any.
  std::string report(const SandboxLimits& limits) const;
};

class Sandbox {
 public:
  // `workspace`: host directory bound at /workspace. `uid` >= 0: when running as root, the command
  // runs as that uid (so RLIMIT_NPROC holds: root is exempt from it); the workspace is handed to it.
  Sandbox(std::string workspace, SandboxLimits limits, int uid);
  SandboxResult run_shell(const std::string& command) const;  // bash -c COMMAND in /workspace
  SandboxResult run_argv(const std::vector<std::string>& argv) const;
  const SandboxLimits& limits() const { return limits_; }
  // "" when bubblewrap works here, else why not (checked once per process).
  static std::string availability();

 private:
  std::vector<std::string> bwrap_prefix() const;
  SandboxResult run(const std::vector<std::string>& inner_argv) const;
  std::string workspace_;
  SandboxLimits limits_;
  int uid_;
};

}  // namespace ca::agent
