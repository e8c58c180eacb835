// One untimed replay of a candidate, as ncu's target.
#include "tools/kernel-prof/replay.hpp"

#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "tools/kernel-prof/candidate.hpp"
#include "tools/kernel-prof/gpu_session.hpp"

namespace ca::prof {

int replay_once(const std::string& file, int gpu_ordinal) {
  Json r = Json::parse(read_file(file));
  GpuSession gpu(gpu_ordinal, false);
  gpu.make_current();
  // The parent's worker still keeps the sets: their device tensors are mapped here as in the parent.
  std::vector<InputSet> sets;
  for (auto& p : r["replay"]["inputs"]) sets.push_back(InputSet{0, Json(p), Json()});
  CandidateBench bench(r["bundle"], r["task"]["loaded"], gpu.identity().arch, Json(r["replay"]["params"]), sets,
                       0x5eedu);
  auto& drv = cuda::Driver::get();
  for (int k = 0; k < bench.input_sets(); ++k) {
    bench.prepare(k, gpu.stream());
    gpu.flusher().flush(gpu.stream());
    bench.enqueue(k, gpu.stream());
  }
  drv.check(drv.cuStreamSynchronize(gpu.stream()), "replay");
  return kExitOk;
}

}  // namespace ca::prof
