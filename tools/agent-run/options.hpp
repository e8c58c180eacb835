// agent-run's options: the flags main parses, checked and completed (defaults that need the
// environment) before any episode runs.
#pragma once
#include <string>

#include "libcommon/cli.hpp"
#include "tools/agent-run/agent.hpp"
#include "tools/agent-run/policy.hpp"

namespace ca::agent_run {

struct Options {
  std::string tasks_file, policy_spec;
  int jobs = 1, per_task = 1, first_uid = 60000;
  RunSettings s;
  PolicyOptions po;
  std::string extra_text, workspace_dir;
  bool no_logprobs = false;
  std::string skill;  // SKILL.md's text, set by finish_options
};

void add_options(CLI::App& app, Options& o);
// What CLI11 cannot check (the sandbox uids, --request-extra's JSON, policy-specific flags), the
// workspace base and its stale leftovers, the locked tools' binaries, the judge pool and SKILL.md.
void finish_options(Options& o, const CommonOptions& common);
// SKILL.md from kernel-check's guide (DATA/skill/SKILL.md unless --skill); a minimal stand-in, and a
// warning, when it is not installed.
std::string load_skill(std::string& path);

}  // namespace ca::agent_run
