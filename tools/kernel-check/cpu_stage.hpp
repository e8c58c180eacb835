// The CPU stage of a check: the candidate's way through libcommon/bundle/candidate.hpp (bundle ->
// plan -> rules -> NVRTC -> plan checks, and the binding when the task's shapes are known), written
// into the check section. Everything kernel-check can decide without a GPU is decided here.
#pragma once
#include <string>

#include "libcommon/bundle/candidate.hpp"
#include "libcommon/jsonl.hpp"

namespace ca::kernel_check {

// The outcome of the CPU stage for one candidate.
struct Prepared {
  ca::Json check = ca::Json::object();  // the `check` section so far
  bool final = false;                   // a verdict already (compile_error, plan_error, policy_violation)
  ca::bundle::IoSpec io;                // from the task record; may lack shapes
  ca::bundle::Candidate candidate;      // its sources, plan, compile and signatures
};

// Reads record.bundle (kernels, plan); `task` may be null (no shapes known yet). options.rules are
// the rules applied (kernel-check always gives them). Throws ca::FieldError when the record lacks
// the bundle or has it mistyped.
Prepared cpu_stage(const ca::Json& record, const ca::Json* task, const ca::bundle::CandidateOptions& options);

}  // namespace ca::kernel_check
