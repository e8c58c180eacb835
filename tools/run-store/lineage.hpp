// Which runs another run started: agent-run's locked compile/verify/profile calls run kernel-check and
// kernel-prof as child processes, each its own run row; `summary` shows them under the episode's run.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/store.hpp"

namespace ca::run_store {

struct RunInfo {
  std::string run_id, tool, host, started_at, ended_at;
  std::string parent_run_id;  // as recorded by the run itself (runs.parent_run_id), when the store has it
  int64_t records_read = -1;  // counts.read; -1 when the run wrote no counts
};

// Every run row of a store, in start order. parent_run_id is read when the runs table has that column.
std::vector<RunInfo> read_runs(Store& store);

// child run_id -> the run that started it, as the child recorded it (runs.parent_run_id, from
// CUDA_AGENT_PARENT_RUN, which a run sets for the processes it starts). Nothing is inferred from
// times or hosts: a run without a recorded parent, or whose parent is not in the store, stays a row.
std::map<std::string, std::string> locked_call_parents(const std::vector<RunInfo>& runs);

// Store::summary() with the locked calls folded into their episode's run: they leave the list, and
// the parent row gets locked_calls, locked_checks and locked_profiles (0 on every other row).
Json folded_summary(Store& store);

}  // namespace ca::run_store
