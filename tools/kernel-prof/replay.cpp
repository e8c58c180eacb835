// One untimed replay of a candidate, as ncu's target.
#include "tools/kernel-prof/replay.hpp"

#include <nvtx3/nvToolsExt.h>

#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "tools/kernel-prof/candidate.hpp"
#include "tools/kernel-prof/gpu_session.hpp"

namespace ca::kernel_prof {

int replay_once(const std::string& file, int gpu_ordinal) {
  Json r = parse_json(read_file(file), file);
  GpuSession gpu(gpu_ordinal, false);
  gpu.make_current();
  // The parent's worker still keeps the set drawn with the params: its device tensors are mapped
  // here as in the parent, and every call of the replay reads them.
  struct KeptSets : CallInputs {
    std::vector<Json> sets;
    Json draw(int64_t call) override { return sets[size_t(call) % sets.size()]; }
    std::string finish(int64_t, bool, bundle::Executor&) override { return ""; }
  } kept;
  for (auto& p : r["replay"]["inputs"]) kept.sets.push_back(Json(p));
  if (kept.sets.empty()) throw InputError("--replay-once: the record has no replay inputs");
  CandidateBench bench(bundle::read_bundle(r), r["task"]["loaded"], gpu.identity().arch, Json(r["replay"]["params"]), kept, 0x5eedu, 0.0, 0,
                       nullptr);  // no rules: the parent applied its own to this bundle before asking for the replay
  auto& drv = cuda::Driver::get();
  for (size_t k = 0; k < kept.sets.size(); ++k) {
    bench.prepare(0, gpu.stream());
    gpu.flusher().flush(gpu.stream());
    // The forward's steps launched one by one inside the range, not the captured graph: ncu's
    // --nvtx-include matches a launch by the ranges open on its thread when the launch call is made,
    // the case NVTX filtering is documented for; whether a graph's kernel nodes inherit the range of
    // the cuGraphLaunch is not something this tool should depend on. The same kernels, arguments and
    // library calls (cuBLASLt, cuDNN) run either way; ncu serializes and replays each kernel anyway.
    nvtxRangePushA(kCandidateRange);
    bench.executor().forward(gpu.stream());
    nvtxRangePop();
  }
  drv.check(drv.cuStreamSynchronize(gpu.stream()), "replay");
  return kExitOk;
}

}  // namespace ca::kernel_prof
