// What a check section says (the `check` of a record): its verdict, the candidate path's refusal and
// findings in the section's words, and the task's reference. Both stages write through these.
#pragma once
#include <optional>
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
// With a load, also whether it is insensitive (a constant answer passes the published bound on
// another draw and a variant) and ill_conditioned (its own fp32 error against float64 is over the
// cap of every bound), each with the worker's evidence; without one, the record's flags where it
// states them (shown, judging nothing). A record's flag that disagrees with the worker's measurement
// is kept in task_record_said ({flag: what the record said}) and decides nothing.
// FieldError naming task.reference.mode for a mode that is not one.
ca::Json reference_check(const ca::Json& task, const ca::Json* load, bool allow_stochastic);

// A task whose reference no verdict can use: the status (task_stochastic, task_insensitive,
// task_ill_conditioned, task_uncalibrated) and reason for a check section's `reference` as
// reference_check wrote it from the worker's load (from: worker), in that order; nullopt when the
// candidate is judged (a record's flags, from: task_record, never decide). A stochastic reference is
// judged anyway under --allow-stochastic (`allow_stochastic`); a task whose float64 run failed
// (task_uncalibrated) only when the bound is not the calibrated one (`calibrated` false).
struct TaskVerdict {
  std::string status, reason;
};
std::optional<TaskVerdict> task_verdict(const ca::Json& reference, bool allow_stochastic, bool calibrated = true);

}  // namespace ca::kernel_check
