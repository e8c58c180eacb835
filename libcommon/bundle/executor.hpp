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
//   auto init_state = ex.init_scratch_hashes();      // what forward may never change
//   ex.upload_tensors(inputs);  ex.reset_call_state(ex.stream());  ex.poison_outputs(ex.stream());
//   ex.fill_guards(pattern_seed);
//   ex.forward(ex.stream());  ex.synchronize();     // or: CUgraphExec g = ex.capture_forward();
//   auto bad = ex.check_guards();                   // buffers written outside their bounds
//   auto changed = ex.changed_init_scratch(init_state);  // a cache kept in init's scratch
//
// Calls are independent by construction (DESIGN.md §5): before every call reset_call_state()
// fills every SM's shared memory with words drawn for that call (it is not cleared between
// kernels), fills the scratch that only forward writes and the library workspaces with bytes drawn
// for that call too (poison_outputs does the outputs), and restores every writable
// module-scope variable (__device__ and __constant__) to its load-time bytes; the scratch init
// wrote is hashed and must not change; the device heap is set to its minimum. kernel-prof also
// gives every call inputs no earlier call saw, so a cache anywhere never hits.
//
// The tool's kernel that judges here (the fingerprint behind hash()) runs in a context of its own,
// never the candidate's, its buffer written and read only between the candidate's calls. The
// kernels that only set the candidate's start state (the shared-memory scrub, the fill) run in the
// candidate's context: that state is theirs alone to set, and nothing the tool reads comes of them.
//   ca::TensorMap out = ex.download_outputs();
#pragma once
#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "libcommon/bundle/plan.hpp"
#include "libcommon/jsonl.hpp"
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
  // Device -> device (an IPC mapping of the worker's tensor, in this context); the byte count must match.
  void upload_device(const std::string& ref, CUdeviceptr src, size_t bytes);
  // The worker's device tensors ("tensors" of its inputs/reference answer): each mapped, copied and
  // unmapped before this returns, so no candidate code ever runs beside a mapping (which would
  // expose the worker's neighbouring tensors). Unknown names are ignored.
  void upload_shared(const Json& descriptions);
  // The output buffers as device tensors another process can map ({"outputs.0": {dtype, shape,
  // bytes, handle, offset}}): valid while this executor lives.
  Json export_outputs();
  std::vector<uint8_t> download(const std::string& ref);
  TensorMap download_outputs();  // "outputs.0", ...
  // sha256 of a buffer's bytes (inputs are hashed before and after a call).
  std::string hash(const std::string& ref);

  // Every output filled with bytes drawn afresh for this call (fill_unpredictable), on `stream`.
  void poison_outputs(CUstream stream);
  // Untimed, before every forward call, enqueued on `stream`: every SM's shared memory (the
  // kernel kScrubSharedKernel), every thread's local memory (kScrubLocalKernel) and every register
  // (kScrubRegistersKernel), forward-only scratch and the cuBLASLt/cuDNN workspaces filled with
  // fresh unpredictable bytes, module globals copied back from their load-time image.
  void reset_call_state(CUstream stream);
  // The scratch buffers init steps touch ("scratch.wt" -> sha256), taken after run_init().
  std::map<std::string, std::string> init_scratch_hashes();
  // Those whose bytes differ from `before` now: forward wrote into init's scratch.
  std::vector<std::string> changed_init_scratch(const std::map<std::string, std::string>& before);
  // Refs of the scratch buffers init writes (hashed) and of the ones forward alone writes (poisoned).
  const std::vector<int>& init_scratch() const { return init_scratch_; }
  const std::vector<int>& forward_scratch() const { return forward_scratch_; }
  int64_t module_global_bytes() const;  // bytes restored before each call
  void fill_guards(uint32_t pattern);     // the guard zones of every buffer
  std::vector<GuardViolation> check_guards(uint32_t pattern);

  // Init steps, then synchronize. Init reads params and writes scratch: every param is hashed
  // before and after, and one init changed throws InitChangedParams (params written at init would be
  // state of any size, outside the scratch cap, that no call's check compares with the task's).
  void run_init();
  void forward(CUstream stream);          // forward steps, asynchronous
  void synchronize();                     // the stream; CudaError on a fault
  // Captures forward() into an executable graph (the caller destroys it with cuGraphExecDestroy).
  CUgraphExec capture_forward();

 private:
  struct Impl;
  void allocate_buffers();
  void load_module(const std::string& cubin);
  void keep_module_images(const std::string& cubin);  // load_module's images of module variables
  CUfunction prepare_launch(const BoundStep& s, size_t si);
  void prepare_gemm(const BoundStep& s, size_t si);
  void prepare_conv(const BoundStep& s, size_t si);
  void run_steps(const std::vector<BoundStep>& steps, CUstream stream);
  // Bytes drawn for this call over [p, p + bytes) (0 or 1 per byte for a bool buffer), on `stream`.
  void fill_unpredictable(CUdeviceptr p, size_t bytes, bool boolean, CUstream stream);
  void free_resources() noexcept;  // what the executor made, so far (a constructor that throws calls it)
  void free_resources_or_throw();
  const BoundPlan plan_;
  ExecutorOptions options_;
  CUmodule module_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUdeviceptr> base_;  // allocation start (guard before)
  std::vector<size_t> after_bytes_;  // guard after each buffer: to the end of its allocation granule
  std::vector<int> init_scratch_, forward_scratch_;
  struct GlobalImage {
    std::string name;              // section:variable (.nv.global:g_a)
    CUdeviceptr ptr = 0;           // its address
    std::vector<uint8_t> image;    // its load-time bytes, in host memory (keep_module_images says why)
  };
  std::vector<GlobalImage> globals_;
  std::vector<CUfunction> functions_;  // per step, init then forward
  std::unique_ptr<Impl> impl_;
};

// run_init's refusal: init wrote into a param (the message names it).
struct InitChangedParams : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The load's refusal of the module's local memory: the context's stack could not grow to its largest
// frame (for every thread the GPU can run). The candidate's own demand, as a launch's would be (a
// runtime_error, never the node's out of memory: red team R6, kernel_check_dodge_gpu); not a
// CudaError, so no caller reads it as the judge's memory.
struct LocalMemoryRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Fills the shared memory of every SM of the current context's device with words drawn afresh
// (a host seed per scrub): one block per SM, each taking the most a block may. The executor
// launches it in the candidate's context before every call (a scrub from another context does not
// reach the candidate: a switch of context leaves shared memory in a state of its own); a
// profiler tells it from a candidate's kernels by how it was launched, never by this name.
inline constexpr const char* kScrubSharedKernel = "ca_scrub_shared";
inline constexpr const char* kFillKernel = "ca_fill_unpredictable";
void scrub_shared_memory(CUstream stream);
// Fills every thread's local memory window (the current context's stack size, for every thread the
// GPU holds at once) with words drawn afresh, in the current context: a kernel finds no word an
// earlier kernel left in its stack. Named kScrubLocalKernel_<bytes> (one per window size).
inline constexpr const char* kScrubLocalKernel = "ca_scrub_local";
void scrub_local_memory(CUstream stream);
// Writes every register of every SM (a kernel whose register count and occupancy are the register
// file: checked when it is compiled) with words drawn afresh, in the current context: a kernel that
// reads a register it never wrote finds nothing an earlier kernel left. Named
// kScrubRegistersKernel_<values kept live> (the first count whose kernel covers the file).
inline constexpr const char* kScrubRegistersKernel = "ca_scrub_registers";
void scrub_registers(CUstream stream);
// The kernels reset_call_state runs whatever the candidate (the fill, the shared and the register
// scrub), compiled and checked for the current context now. A tool calls it when it starts, so that a
// GPU it cannot scrub (InternalError) stops the tool there and never reads as a candidate's failure.
void prepare_call_scrubs();
// What a tool calls when it starts: prepare_call_scrubs, then the shared and the register scrub run
// once in the current context and waited for, so that a scrub this GPU compiles but cannot run (a
// fault, a refused launch) stops the tool there too, instead of failing every candidate's call.
void start_call_scrubs();

// The context the tool's own kernels that judge run in beside a candidate (the fingerprint and
// kernel-prof's compare), one per device in this process, created on first use for the current
// context's device, never given to a candidate; and a stream of it.
struct ToolContext {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
};
const ToolContext& tool_context();

}  // namespace ca::bundle
