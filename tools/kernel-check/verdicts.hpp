// What a check section says (the `check` of a record): its verdict, the candidate path's refusal and
// findings in the section's words, and the task's reference. Both stages write through these.
#pragma once
#include <string>

#include "libcommon/bundle/candidate.hpp"
#include "libcommon/jsonl.hpp"

namespace ca::kernel_check {

// Sets status/reason (and compiled/correct) in a check section.
void set_verdict(ca::Json& check, const std::string& status, const std::string& reason);

// A refusal of the candidate path (libcommon/bundle/candidate.hpp) as its verdict: the violation,
// status and reason, the kernel it names, a failed compile's log.
void refuse(ca::Json& check, const ca::bundle::Refusal& refusal);

// What the CPU stage found on the candidate's way: the compile (time, cache, flags, NVRTC, how it
// was confined), and once compiled its resources and precision (each launched kernel's), then the
// binding's when the task's shapes bound it. Not the verdict (refuse).
void candidate_fields(ca::Json& check, const ca::bundle::Candidate& c);

// A binding's fields: the precision with the bound plan's library steps, and its scratch bytes
// (when the binder bound it; the refusal, if any, is refuse's).
void binding_fields(ca::Json& check, const ca::bundle::Candidate& c, const ca::bundle::Binding& binding);

// The check section's `reference`: the mode the task's reference runs in (train, KernelBench's, unless
// the task says eval) and whether it is stochastic, from the worker's load answer when there is one
// (`load`), else from the task record (null: nothing measured it); with the rule for a stochastic one
// (task_stochastic: not judged; allow_stochastic: judged against one draw by the published bound).
// FieldError naming task.reference.mode for a mode that is not one.
ca::Json reference_check(const ca::Json& task, const ca::Json* load, bool allow_stochastic);

}  // namespace ca::kernel_check
