// A candidate's one way from its record to a bound plan, for kernel-check and kernel-prof alike:
//
//   bundle (record.bundle) -> plan (parsed) -> rules on the plan and the sources -> every launched
//   kernel defined -> compile (NVRTC, the disk cache) -> rules on the compiled code -> plan checked
//   against the kernels' signatures -> bound to the task's tensors -> rules on the bound plan;
//   the precision of each launched kernel read from the compiled code, on request.
//
//   BundleSources src = read_bundle(record);                   // FieldError: the record's fault
//   Candidate c = prepare_candidate(std::move(src), &io, opt); // io: task shapes (may be partial)
//   if (c.refused) ... c.refused->status, c.refused->reason ...
//   Binding b = bind_candidate(c, worker_io, limits, opt.rules);  // again, on a GPU's tensors
//
// The first step that refuses the candidate says so once, in one wording (Refusal), and the way
// stops there; nothing on it throws for a candidate's fault but read_bundle (a record without its
// bundle is a bad record, not a verdict).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/bundle/bind.hpp"
#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/plan.hpp"
#include "libcommon/bundle/rules.hpp"
#include "libcommon/jsonl.hpp"

namespace ca::bundle {

// Why a candidate goes no further: the verdict's status and reason, and what names the place.
struct Refusal {
  std::string status;  // plan_error, compile_error or policy_violation
  std::string reason;
  std::string kernel;                  // the kernel a plan_error names, or ""
  std::optional<Violation> violation;  // a policy_violation's rule, place and reason
  std::string log;                     // a failed compile's log (at most 4000 bytes kept), or ""
};

// A bundle as a record carries it: its kernel files and its plan.
struct BundleSources {
  std::map<std::string, std::string> kernels;  // file name -> CUDA source text
  Json plan;                                   // as given: YAML text or an object
};

// record.bundle: {kernels: {file: source}, plan}. Throws FieldError naming bundle,
// bundle.kernels, bundle.kernels.<file> or bundle.plan (the one wording of each).
BundleSources read_bundle(const Json& record);

struct CandidateOptions {
  std::string arch = "sm_90";  // compiled for, and the launch limits of the binding before a GPU's
  std::string cache_dir;       // the cubin cache (empty: default_cache_dir())
  bool use_cache = true;
  std::vector<std::string> extra_flags;
  // The rules a candidate is held to. Null: none are applied here, because the caller trusts a
  // verdict that applied them to this bundle (kernel-prof times only records whose check passed).
  const Rules* rules = nullptr;
};

// The plan bound to a task's tensors (`io`, shapes known), the rules on the bound plan (step counts
// unrolled, the scratch cap) when given.
struct Binding {
  std::optional<BoundPlan> bound;        // set when the binder bound it (even if it was then refused)
  std::optional<int64_t> scratch_bytes;  // the bound plan's scratch, unless its sizes overflow (refused)
  std::optional<ScratchCap> scratch_cap; // the cap the rules held that scratch to (rules.hpp), when given
  std::optional<Refusal> refused;        // plan_error (the binder's) or policy_violation
};

struct Candidate {
  BundleSources sources;
  Plan plan;
  // The compile's result, failed or not; null when the way stopped before compiling.
  std::shared_ptr<const CompileResult> compiled;
  Signatures signatures;             // the compiled kernels' (when compiled->ok)
  Binding binding;                   // to prepare_candidate's io, when its shapes are known
  std::optional<Refusal> refused;    // where the way stopped, or nothing

  bool compiled_ok() const { return compiled && compiled->ok; }
  // Each launched kernel's precision (with every function it can call, read from the PTX as
  // ptxas reads it), by the plan's name expression; empty without compiled kernels.
  std::map<std::string, std::string> kernel_precisions() const;
  // The candidate's precision: the lowest of the kernels the plan launches (a kernel never launched
  // does not count), of its library steps (tf32 gemm; fp16/bf16 buffers, known once bound) and of
  // its scratch declared in a narrow float type (float16, bfloat16, float8_*).
  std::string precision(const BoundPlan* bound) const;
};

// The way up to binding: parse, rules on plan and sources, compile (failed: a launched kernel the
// sources never name is a plan_error, else compile_error), rules on the compiled code, the plan checked against the signatures (with `io`'s tensors when given: a task
// is known), and bound to `io` when its shapes are known (options.arch's launch limits).
// A candidate's fault is c.refused, never an exception; EnvironmentError without NVRTC.
Candidate prepare_candidate(BundleSources sources, const IoSpec* io, const CandidateOptions& options);

// A candidate compiled elsewhere, ready for bind_candidate: kernel-check's runner child gets the
// parent's cubin, PTX and name map and the plan text, and reads the plan and the signatures again
// (the parent's CPU stage took the whole way with the rules). PlanError for a plan that does not parse.
Candidate compiled_candidate(const Json& plan, CompileResult compiled);

// The binding to `io` (a GPU's worker's tensors, or the task record's), under `limits`, and the rules
// on the bound plan when `rules` is given.
Binding bind_candidate(const Candidate& c, const IoSpec& io, const LaunchLimits& limits, const Rules* rules);

}  // namespace ca::bundle
