// The GPU kernel-prof times on.
#include "tools/kernel-prof/gpu_session.hpp"

#include "libcommon/bundle/executor.hpp"
#include "libcommon/cuda/cupti.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"

namespace ca::kernel_prof {

GpuSession::GpuSession(int ordinal, bool trace) {
  auto& drv = cuda::Driver::get();  // EnvironmentError: no driver / no GPU
  if (ordinal >= drv.device_count)
    throw EnvironmentError(log::cat("GPU ", ordinal, " asked for (--gpus), but the driver sees ", drv.device_count));
  // CUPTI's activity API must be enabled before the context does work we want traced.
  if (trace) {
    auto& cupti = cuda::CuptiTracer::instance();
    if (!cupti.available()) log::warn("CUPTI: ", cupti.why(), "; device time falls back to CUDA events");
  }
  ctx_ = drv.primary_context(ordinal);
  id_ = measure::identify_gpu(ordinal);
  drv.check(drv.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  make_current();
  trusted_ = bundle::tool_context();  // made now, for this device; leaves ctx_ current
  bundle::start_call_scrubs();         // in ctx_: a GPU the judge cannot scrub stops here, not at a candidate
  flusher_ = std::make_unique<measure::L2Flusher>(id_.l2_bytes, 2.0);
  log::verbose("GPU ", ordinal, ": ", id_.name, " ", id_.uuid, ", driver ", id_.driver, ", L2 ", id_.l2_bytes >> 20,
               " MiB, flush buffer ", flusher_->bytes() >> 20, " MiB");
}

GpuSession::~GpuSession() {
  worker_.reset();
  flusher_.reset();
  auto& drv = cuda::Driver::get();
  if (stream_) drv.cuStreamDestroy(stream_);
}

void GpuSession::make_current() const {
  auto& drv = cuda::Driver::get();
  drv.check(drv.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
}

worker::WorkerClient& GpuSession::worker() {
  if (!worker_) {
    worker::WorkerOptions w;
    w.device = "cuda:" + std::to_string(id_.ordinal);
    w.request_timeout = std::chrono::milliseconds(600000);  // torch.compile with max-autotune is slow
    w.memory_limit_mb = worker_memory_mb_;
    w.one_task_per_process = one_task_per_worker_;
    worker_ = std::make_unique<worker::WorkerClient>(w);
  }
  return *worker_;
}

std::string GpuSession::torch_version() {
  const Json& hello = worker().hello();
  return hello.value("torch_version", std::string("unknown"));
}

}  // namespace ca::kernel_prof
