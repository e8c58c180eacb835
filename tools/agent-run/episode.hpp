// One episode: a fresh workspace, the loop between a policy and the tools under the limits, and the
// candidate record it leaves (bundle + `episode` section).
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"
#include "tools/agent-run/agent.hpp"
#include "tools/agent-run/policy.hpp"

namespace ca::agent_run {

struct EpisodeInput {
  Json task;            // the task record (needs `code`)
  std::string task_id;
  int64_t index = 0;      // episode number in this run
  uint64_t seed = 0;      // sampling seed of the policy
  int sandbox_uid = 65534;
};

// Runs the episode to its end and returns the candidate record. Never throws for what the policy or
// the tools do: those end the episode with a stop reason.
Json run_episode(const EpisodeInput& in, Policy& policy, const Json& policy_description, const RunSettings& settings,
                   const std::string& skill_text);

// The prompts the episode starts with.
std::string system_prompt();
std::string user_prompt(const Json& task);
// Tokens of a text when the server gives no usage: about 4 bytes per token for code and English.
int64_t estimate_tokens(const std::string& text);

// The best verified result of an episode's results, by speedup over compile (profiled beats merely
// verified); nullptr when none passed.
Json best_result(const Json& results);

}  // namespace ca::agent_run
