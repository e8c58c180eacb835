// agent-run's episodes: the input's tasks (--episodes-per-task each) run on -j threads, each
// episode's record written in input order as soon as those before it are; interrupts, a closed
// output and bad lines handled as DESIGN.md §1 says.
#pragma once
#include <memory>
#include <string>

#include "libcommon/cli.hpp"
#include "libcommon/store.hpp"
#include "tools/agent-run/options.hpp"
#include "tools/agent-run/policy.hpp"

namespace ca::agent_run {

// SIGINT, SIGTERM (Slurm's scancel and time limit), SIGHUP: no new episode starts, running ones stop
// at the next safe point with their children, and are written as interrupted.
void install_signal_handlers();
// Runs them all; returns the exit status (128 + the signal after an interrupt). The store (may be
// null) gets the tasks, every finished episode and the run's end.
int run_episodes(Options& o, const CommonOptions& opt, Policy& policy, std::unique_ptr<Store>& store);

}  // namespace ca::agent_run
