// --replay-once FILE: run a candidate's forward once per input set and exit, for ncu to profile
// (kernel-prof --metrics runs it as ncu's target; ncu owns CUPTI in that process).
#pragma once
#include <string>

namespace ca::kernel_prof {

// FILE: the record with task.loaded (the worker's load answer) and replay {params, inputs: [paths]}.
int replay_once(const std::string& file, int gpu);

}  // namespace ca::kernel_prof
