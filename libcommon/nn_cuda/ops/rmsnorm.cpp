// RMSNorm on the GPU: rmsnorm_forward, rmsnorm_backward (declared in libcommon/nn_cuda/ops.hpp); the
// weight's gradient is matmul.cu's column_sum_add (ops::column_sum_add).
//   CPU twin  ca::nn::rmsnorm_forward, ca::nn::rmsnorm_backward (libcommon/nn/ops.hpp)
//   test      tests/nn_cuda/ops/rmsnorm_test.cpp
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> rmsnorm_kernels() { return for_both_dtypes({"rmsnorm_forward", "rmsnorm_backward"}); }

}  // namespace ops

void rmsnorm_forward(Gpu& gpu, DType dt, Ptr y, Ptr rstd, Ptr x, Ptr w, int rows, int C, float eps) {
  gpu.launch(ops::kernel("rmsnorm_forward", dt), {unsigned(rows)}, {256}, 0, {&y, &rstd, &x, &w, &C, &eps});
}

void rmsnorm_backward(Gpu& gpu, DType dt, Ptr dx, Ptr dw, Ptr dy, Ptr x, Ptr w, Ptr rstd, int rows, int C) {
  gpu.launch(ops::kernel("rmsnorm_backward", dt), {unsigned(rows)}, {256}, 0, {&dx, &dy, &x, &w, &rstd, &C});
  if (dw) ops::column_sum_add(gpu, dt, dw, dy, x, rstd, rows, C);
}

}  // namespace ca::nn_cuda
