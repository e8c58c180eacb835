// --replay-once FILE: run a candidate's forward once per input set and exit, for ncu to profile
// (kernel-prof --metrics runs it as ncu's target; ncu owns CUPTI in that process).
#pragma once
#include <string>

namespace ca::kernel_prof {

// FILE: the record with task.loaded (the worker's load answer) and replay {params, inputs: [paths]}.
int replay_once(const std::string& file, int gpu);

// The NVTX range the replay opens around the candidate's own launches (its forward's steps, launched
// one by one), and only those: ncu is told to profile kernels launched inside it (--nvtx-include), so
// the tool's scrub, fingerprint and flush kernels are left out by when the tool launched them, never
// by their names (issue 31: trusted kernels are told apart by identity).
inline constexpr const char* kCandidateRange = "cuda-agent-candidate";

}  // namespace ca::kernel_prof
