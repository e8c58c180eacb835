// Types shared by the agent loop: the options of one run, tool calls and assistant turns.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::agent_run {

class JudgePool;  // judge.hpp

// Limits of the bash tool's sandbox (bubblewrap + rlimits), per command.
struct SandboxLimits {
  int wall_s = 60;                  // wall clock, everything in the sandbox killed after it
  int cpu_s = 60;                   // RLIMIT_CPU per process
  int64_t memory_mib = 8192;        // RLIMIT_AS per process
  int processes = 256;              // RLIMIT_NPROC for the sandbox's user
  int64_t file_size_mib = 64;       // RLIMIT_FSIZE
  int64_t output_bytes = 65536;     // bytes of stdout+stderr kept (cut inside the sandbox)
  int64_t workspace_mib = 1024;     // disk cap of /workspace and /tmp together, per episode
  Json to_json() const;
};

struct RunSettings {
  int max_turns = 150;
  int64_t max_context = 131072;       // tokens
  double episode_timeout_s = 7200;
  std::string submit = "final";       // final | best
  int64_t tool_output_chars = 32768;  // a tool result longer than this is cut for the model
  SandboxLimits sandbox;
  // The locked tools: kernel-check / kernel-prof executables and extra arguments.
  std::string kernel_check, kernel_prof;
  std::vector<std::string> check_args, prof_args;
  std::string store_path;             // passed to kernel-check/kernel-prof (baseline cache); empty: --no-store
  double locked_timeout_s = 900;      // per compile/verify/profile call
  // --judge: verify and profile POST to these kernel-check / kernel-prof services (compile still
  // runs kernel-check --compile-only here); empty: a process per call.
  std::vector<std::string> judge_urls;
  std::shared_ptr<JudgePool> judge;
  std::string skill_path;             // SKILL.md given to the model
  Json to_json() const;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // the JSON text exactly as the model produced it
};

struct AssistantTurn {
  std::string content;
  std::optional<std::string> reasoning;  // reasoning_content when the server splits it out
  std::vector<ToolCall> tool_calls;
  std::string finish_reason;
  Json token_ids = nullptr;  // array of ints when the server returned them
  Json prompt_token_ids = nullptr;  // the context the server saw, as token ids (vLLM return_token_ids)
  Json logprobs = nullptr;   // array of numbers (one per generated token) when returned
  Json tokens = nullptr;     // token strings of the logprobs, when returned
  int64_t prompt_tokens = -1, completion_tokens = -1;  // from usage; -1 when absent
  int attempts = 1;          // HTTP attempts it took (retries + 1)
  double latency_ms = 0;
};

// Thrown by a policy that cannot produce a turn (dead server, bad answer, script error).
struct PolicyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Set by the SIGINT/SIGTERM/SIGHUP handler; episodes stop at the next safe point, running children
// are stopped. g_signal is the first signal received (0: none).
extern std::atomic<bool> g_interrupted;
extern std::atomic<int> g_signal;

}  // namespace ca::agent_run
