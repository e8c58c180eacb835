// The nine tools offered to the model (OpenAI function-calling schemas) and their dispatch:
// file tools on the workspace, bash in the sandbox, and the locked compile/verify/profile that run
// kernel-check and kernel-prof outside the sandbox on a snapshot of the bundle.
#pragma once
#include <chrono>
#include <string>

#include "libcommon/jsonl.hpp"
#include "tools/agent-run/agent.hpp"
#include "tools/agent-run/sandbox.hpp"
#include "tools/agent-run/workspace.hpp"

namespace ca::agent_run {

// The `tools` array of a chat-completions request.
const Json& tool_schemas();

struct ToolOutcome {
  std::string text;       // what the model sees
  bool ok = true;         // false: a tool error (malformed call, bad path, missing binary, ...)
  bool malformed = false; // unknown tool, arguments not JSON, or a missing/mistyped argument
  Json result = nullptr;  // compile/verify/profile: {tool, candidate_id, bundle, check, prof}
  double elapsed_ms = 0;
};

class Toolbox {
 public:
  Toolbox(const RunSettings& settings, Workspace& workspace, const Json& task, const std::string& task_id, int uid);
  ToolOutcome call(const ToolCall& call);
  // The episode's end (--episode-timeout): a command, a locked tool or a judge call still running
  // then is ended, and none is given more time than is left.
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

 private:
  // The call by name, its arguments parsed (call() turns a file system error into the model's error).
  ToolOutcome dispatch(const std::string& n, const Json& args, std::chrono::steady_clock::time_point start);
  ToolOutcome sandboxed(const std::string& n, const Json& args, std::chrono::steady_clock::time_point start);
  ToolOutcome locked(const std::string& which);
  struct LockedStep;  // one kernel-check or kernel-prof answer (toolbox.cpp)
  std::string locked_refusal(const std::string& which, BundleRead& read) const;
  LockedStep locked_step(const std::string& which, const std::string& tool, const Json& in, const char* section);
  const RunSettings& settings_;
  Workspace& workspace_;
  const Json& task_;
  std::string task_id_;
  Sandbox sandbox_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  std::string past_deadline() const;  // "" before the deadline, else why the call must end
};

// kernel-check / kernel-prof next to agent-run unless CA_KERNEL_CHECK / CA_KERNEL_PROF say otherwise.
std::string default_locked_binary(const std::string& name, const char* env_var);

}  // namespace ca::agent_run
