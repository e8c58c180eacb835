// --gpus with several ordinals: one kernel-prof child per GPU, each record to the next free one, output
// written in input order (so a pipeline downstream sees the same stream as with one GPU).
#pragma once
#include <string>
#include <vector>

#include "libcommon/cli.hpp"
#include "tools/kernel-prof/options.hpp"

namespace ca::prof {

// The child's argv: ours without --gpus, -i/-o and --shard, plus --gpus <ordinal> -i - -o - --shard 0/1.
std::vector<std::string> child_argv(const std::vector<std::string>& argv, int ordinal);
int run_on_gpus(const ProfOptions& options, const CommonOptions& common, int argc, char** argv);

}  // namespace ca::prof
