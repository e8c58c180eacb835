// The CPU stage of a check: read the bundle, parse the plan, apply the rules, compile with NVRTC,
// check the plan against the kernels' signatures (and bind it when the task's shapes are known).
// Everything kernel-check can decide without a GPU is decided here.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/plan.hpp"
#include "libcommon/jsonl.hpp"
#include "tools/kernel-check/rules.hpp"

namespace ca::kernel_check {

struct PrepareOptions {
  std::string arch = "sm_90";
  std::string cache_dir;
  bool use_cache = true;
  std::vector<std::string> extra_flags;
};

// The outcome of the CPU stage for one candidate.
struct Prepared {
  ca::Json check = ca::Json::object();  // the `check` section so far
  bool final = false;                       // a verdict already (compile_error, plan_error, policy_violation)
  ca::bundle::Plan plan;
  ca::Json plan_json;                       // the plan as given (YAML text or object)
  ca::bundle::IoSpec io;                    // from the task record; may lack shapes
  std::shared_ptr<ca::bundle::CompileResult> compiled;
  ca::bundle::Signatures signatures;
  std::map<std::string, std::string> kernels;
};

// Reads record.bundle (kernels, plan); `task` may be null (no shapes known yet). Throws
// ca::FieldError when the record lacks the bundle or has it mistyped.
Prepared prepare_candidate(const ca::Json& record, const ca::Json* task, const Rules& rules,
                           const PrepareOptions& options);

// The check section's `reference`: the mode the task's reference runs in (train, KernelBench's, unless
// the task says eval) and whether it is stochastic, from the worker's load answer when there is one
// (`load`), else from the task record (null: nothing measured it); with the rule for a stochastic one
// (task_stochastic: not judged; allow_stochastic: judged against one draw by the published bound).
// FieldError naming task.reference.mode for a mode that is not one.
ca::Json reference_check(const ca::Json& task, const ca::Json* load, bool allow_stochastic);

// Sets status/reason (and compiled/correct) in a check section.
void set_verdict(ca::Json& check, const std::string& status, const std::string& reason);
// The precision of the candidate: the lowest of the kernels the plan launches (each with every
// function it can call, read from the PTX as ptxas reads it) and of its library steps (tf32 gemm,
// fp16/bf16 buffers).
std::string candidate_precision(const Prepared& p, const ca::bundle::BoundPlan* bound);
// Each launched kernel's precision, by the plan's name expression (empty without compiled kernels).
std::map<std::string, std::string> launched_kernel_precisions(const Prepared& p);

}  // namespace ca::kernel_check
