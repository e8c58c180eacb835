// The CPU stage (cpu_stage.hpp): the candidate path, then its findings and verdict in the check.
#include "tools/kernel-check/cpu_stage.hpp"

#include "tools/kernel-check/verdicts.hpp"

namespace ca::kernel_check {

Prepared cpu_stage(const ca::Json& record, const ca::Json* task, const ca::bundle::CandidateOptions& options) {
  Prepared p;
  ca::bundle::BundleSources sources = ca::bundle::read_bundle(record);
  if (task) p.io = ca::bundle::IoSpec::from_json(*task);
  p.check["compiled"] = false;
  p.check["correct"] = false;
  p.check["arch"] = options.arch;
  p.candidate = ca::bundle::prepare_candidate(std::move(sources), task ? &p.io : nullptr, options);
  candidate_fields(p.check, p.candidate);
  if (p.candidate.refused) {
    refuse(p.check, *p.candidate.refused);
    p.final = true;
  }
  return p;
}

}  // namespace ca::kernel_check
