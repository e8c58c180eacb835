// The executor: runs a bound plan on one GPU. It allocates every buffer (inputs, outputs, params,
// scratch) with guard zones before and after, loads the cubin, binds kernel arguments, and runs
// the init steps once and the forward steps per call (launch, gemm via cuBLASLt, conv via cuDNN),
// on one stream, so a forward can be captured in a CUDA graph. kernel-check's runner and
// kernel-prof both use it:
//
//   auto& drv = ca::cuda::Driver::get();
//   drv.primary_context(gpu);
//   ca::bundle::Executor ex(bound, cubin);          // allocates, loads; CudaError on failure
//   ex.upload("params.weight", bytes); ...          // or upload_tensors(read_safetensors(...))
//   ex.run_init();                                  // once
//   ex.upload_tensors(inputs);  ex.poison_outputs();  ex.fill_guards(pattern_seed);
//   ex.forward(ex.stream());  ex.synchronize();     // or: CUgraphExec g = ex.capture_forward();
//   auto bad = ex.check_guards();                   // buffers written outside their bounds
//   ca::TensorMap out = ex.download_outputs();
#pragma once
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libcommon/bundle/plan.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::bundle {

struct ExecutorOptions {
  size_t guard_bytes = 4096;  // before and after each buffer
};

struct GuardViolation {
  std::string buffer;  // "outputs.0"
  bool before = false; // the zone before the buffer (else after)
  int64_t offset = 0;  // first changed byte, relative to the zone's start
  std::string text() const;
};

class Executor {
 public:
  Executor(const BoundPlan& plan, const std::string& cubin, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  CUstream stream() const { return stream_; }
  const BoundPlan& plan() const { return plan_; }
  CUdeviceptr device_pointer(const std::string& ref) const;

  // Host -> device by buffer ref ("inputs.0", "params.fc.weight"); the byte count must match.
  void upload(const std::string& ref, const void* data, size_t bytes);
  // Tensors named as the worker writes them ("inputs.0", "params.<name>"); unknown names are ignored.
  void upload_tensors(const TensorMap& tensors);
  std::vector<uint8_t> download(const std::string& ref);
  TensorMap download_outputs();  // "outputs.0", ...
  // sha256 of a buffer's bytes (inputs are hashed before and after a call).
  std::string hash(const std::string& ref);

  void poison_outputs();                  // every output byte 0xFF: NaN for fp32/fp16/bf16
  void fill_guards(uint32_t pattern);     // the guard zones of every buffer
  std::vector<GuardViolation> check_guards(uint32_t pattern);

  void run_init();                        // init steps, then synchronize
  void forward(CUstream stream);          // forward steps, asynchronous
  void synchronize();                     // the stream; CudaError on a fault
  // Captures forward() into an executable graph (the caller destroys it with cuGraphExecDestroy).
  CUgraphExec capture_forward();

 private:
  struct Impl;
  void run_steps(const std::vector<BoundStep>& steps, CUstream stream);
  const BoundPlan plan_;
  ExecutorOptions options_;
  CUmodule module_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUdeviceptr> base_;  // allocation start (guard before)
  std::vector<CUfunction> functions_;  // per step, init then forward
  std::unique_ptr<Impl> impl_;
};

}  // namespace ca::bundle
