// The bundle rules: which step kinds, headers and constructs a bundle may use, caps on module-scope
// memory, scratch size and steps. Default in datasets/skill/rules.yaml (compiled in). Applied on a
// candidate's way through candidate.hpp, where each check has its place; kernel-check loads them
// (--rules).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/plan.hpp"

namespace re2 {
class RE2;
}  // namespace re2

namespace ca::bundle {

struct Violation {
  std::string rule;    // "clock", "allowed_headers", "max_module_global_bytes", ...
  std::string reason;  // human-readable, with the place
  std::string file;
  int line = 0;
  Json to_json() const;
};

struct ForbiddenRule {
  std::string rule, why, source_text, ptx_text;
  // RE2, not std::regex: the text they search is the policy's (std::regex recursed per character and
  // overflowed the stack on a 1 MiB line); RE2 runs in linear time without recursion.
  std::shared_ptr<const re2::RE2> source, ptx;
};

// The cap on a plan's scratch bytes for one task (rules.yaml: scratch_cap), and what sized it.
struct ScratchCap {
  int64_t bytes = 0;
  // "reference_peak": scratch_peak_factor x the reference's peak memory as the judge's own worker
  // measured it (IoSpec::from_load); "task_record": the same from the record's reference.peak_bytes
  // (compile-only, where no worker runs); "io_ratio": the floor, max_scratch_ratio x inputs+outputs.
  std::string from;
  std::optional<ReferencePeak> peak;  // the reference's peak memory when known, whichever won
  std::string rule;                   // the rule a scratch over it breaks (scratch_peak_factor, max_scratch_ratio)
  std::string how;                    // the cap in words, for the violation's reason
  Json to_json() const;               // {bytes, from, peak_bytes?}: the check section's scratch_cap
};

struct Rules {
  std::vector<std::string> allowed_steps, allowed_headers;
  std::vector<ForbiddenRule> forbidden;
  int64_t max_module_global_bytes = 65536;
  // Local memory one thread of any function may need (its stack frame, a kernel's with its callees'):
  // the driver holds a launch's local memory for every thread the GPU can run at once, beside the
  // scratch cap, for as long as the process lives (rules.yaml says why).
  int64_t max_stack_bytes = 8192;
  // Scratch cap: the larger of scratch_peak_factor x the reference's peak memory (scratch_cap:
  // reference_peak) and the floor max_scratch_ratio x inputs+outputs; + the slack (rules.yaml).
  std::string scratch_cap = "reference_peak";  // or "io_ratio": the floor alone
  double scratch_peak_factor = 2.0;
  // Not a rules key: the scratch cap is a GPU judge's, from its own worker's measurement, so a
  // check before it (kernel-check's CPU stage on the record's shapes) leaves it out.
  bool scratch_cap_by_judge = false;
  double max_scratch_ratio = 4.0;
  int64_t max_scratch_slack_bytes = 16 << 20;
  int max_forward_steps = 16384, max_init_steps = 4096;  // per call, repeats unrolled
  std::string source = "default";  // "default" or the file path
  std::string file_text;           // the file's text as parsed ("" for the default alone)

  static const std::string& default_text();
  // Default first, then the file's keys over it. Throws UsageError for a malformed file.
  static Rules load(const std::string& path);
  static Rules parse(const std::string& yaml, const std::string& name);
  // What a verdict or a timing under these rules depends on: the shipped default's text and the
  // file's (kernel-check's judged_by, kernel-prof's timed_by).
  Json identity() const;

  // Source-level rules (headers, forbidden constructs) and plan-level rules (steps).
  std::optional<Violation> check_sources(const std::map<std::string, std::string>& kernels) const;
  std::optional<Violation> check_plan(const Plan& plan) const;
  // After compiling: PTX constructs and module memory.
  std::optional<Violation> check_compiled(const CompileResult& r) const;
  // The scratch cap for the task `io` describes: from its reference's peak memory when `io` knows
  // it (IoSpec::reference_peak: the judge's own worker, or a task record in compile-only), else
  // the io floor.
  ScratchCap scratch_cap_for(const IoSpec& io) const;
  // With shapes: steps per call (repeats unrolled) and scratch bytes against scratch_cap_for(io).
  std::optional<Violation> check_bound(const BoundPlan& bound, const IoSpec& io) const;
};

// Comments replaced by spaces (newlines kept, so line numbers hold); string literals kept.
std::string strip_comments(const std::string& source);

}  // namespace ca::bundle
