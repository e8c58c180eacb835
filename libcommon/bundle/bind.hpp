// Checking a plan against its kernels' signatures and binding it to the task's shapes (DESIGN.md §3).
//
//   check_plan(plan, signatures, &io);                 // PlanError naming step and argument
//   BoundPlan bound = bind_plan(plan, signatures, io);  // sizes, grids, packed scalars
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libcommon/bundle/launch_limits.hpp"
#include "libcommon/bundle/plan.hpp"
#include "libcommon/bundle/signature.hpp"
#include "libcommon/bundle/tensor_spec.hpp"

namespace ca::bundle {

using Signatures = std::map<std::string, KernelSignature>;  // by kernel name expression

// The checks that need no GPU: kernels known, arity, argument types, dims bound, init touching
// inputs/outputs, every declared output written by forward. With `io` shapes, also sizes and dtypes.
// Grid, block and dynamic shared memory against `limits` (the target arch's; sm_90's by default).
void check_plan(const Plan& plan, const Signatures& sigs, const IoSpec* io, const LaunchLimits& limits = {});

struct BoundBuffer {
  std::string ref;  // "inputs.0", "scratch.tmp"
  Space space;
  int index = 0;    // within its space (inputs/outputs by position, params by spec order)
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  bool module_buffer = false;  // a params buffer that is a module buffer, not a Parameter (TensorSpec)
};

struct BoundArg {
  int buffer = -1;              // index into BoundPlan::buffers, or -1 for a scalar
  int64_t offset = 0;           // a view: bytes past the buffer's start
  std::vector<uint8_t> scalar;  // packed as the kernel's parameter type
  std::string text;
};

struct BoundLaunch {
  std::string kernel, mangled;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned shared = 0;
  std::vector<BoundArg> args;
  bool cooperative = false;
  unsigned cluster[3] = {0, 0, 0};  // 0: no cluster
};

// The most steps one call may run once its loops are unrolled (each a launch or a library call in
// the forward graph): past it, binding is refused naming the limit. The rules may set a lower one.
inline constexpr int64_t kMaxBoundSteps = 100000;

struct BoundGemm {
  int a = -1, b = -1, out = -1, bias = -1;
  int64_t a_offset = 0, b_offset = 0, out_offset = 0, bias_offset = 0;  // views, in bytes
  int64_t m = 0, n = 0, k = 0, batch = 1;
  // Row strides and batch strides of a, b, out as stored (row-major), in elements; dense unless the
  // plan gave them.
  int64_t lda = 0, ldb = 0, ldc = 0, stride_a = 0, stride_b = 0, stride_c = 0;
  bool trans_a = false, trans_b = false;
  std::string activation, compute, dtype;
  double alpha = 1, beta = 0;
};

struct BoundConv {
  int x = -1, w = -1, out = -1, bias = -1;
  int64_t x_offset = 0, w_offset = 0, out_offset = 0, bias_offset = 0;  // views, in bytes
  int spatial = 2;                      // 1, 2 or 3
  int64_t n = 0, c = 0, k = 0;          // batch, x's channels, out's channels
  int64_t in[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, out_size[3] = {1, 1, 1};  // first `spatial` used
  int64_t stride[3] = {1, 1, 1}, padding[3] = {0, 0, 0}, dilation[3] = {1, 1, 1}, output_padding[3] = {0, 0, 0};
  int64_t groups = 1;
  bool transposed = false;
  std::string dtype;
  // x's and out's strides in elements per dimension [n, c, spatial...]; empty: packed.
  std::vector<int64_t> x_strides, out_strides;
  int64_t x_elements() const;
  int64_t w_elements() const;  // k * c / groups * kernel (transposed: c * k / groups * kernel)
  int64_t out_elements() const;
};

struct BoundStep {
  Step::Kind kind;
  std::string label;
  BoundLaunch launch;
  BoundGemm gemm;
  BoundConv conv;
  // The buffers it names (launch arguments, gemm and conv operands), as indices into the plan's.
  std::vector<int> buffers() const;
};

struct BoundPlan {
  std::vector<BoundBuffer> buffers;
  std::vector<BoundStep> init, forward;
  std::map<std::string, int64_t> dims;  // the integer dims, evaluated
  int buffer_index(const std::string& ref) const;  // -1 when absent
  int64_t scratch_bytes() const;
  // The task's inputs, or its Parameters (module buffers left out: running statistics a training-mode
  // forward never reads), that no init or forward step names, in order ("params.layers.5.weight"): a
  // plan whose layer count is short of the task's binds, and this says so before any call fails.
  std::vector<std::string> unread(Space space) const;
};

// Evaluates dims, scratch sizes, grids and scalars for the task's shapes. Throws PlanError.
BoundPlan bind_plan(const Plan& plan, const Signatures& sigs, const IoSpec& io, const LaunchLimits& limits = {});

}  // namespace ca::bundle
