// The token embedding on the GPU: embedding_forward, embedding_backward (declared in
// libcommon/nn_cuda/ops.hpp).
//   CPU twin  the embedding loops of ca::nn::Model's forward and backward (libcommon/nn/model.cpp);
//             the test spells the same gather and scatter-add out
//   test      tests/nn_cuda/ops/embedding_test.cpp
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> embedding_kernels() { return for_both_dtypes({"embedding_forward", "embedding_backward"}); }

}  // namespace ops

void embedding_forward(Gpu& gpu, DType dt, Ptr x, Ptr tokens, Ptr table, int rows, int C) {
  gpu.launch(ops::kernel("embedding_forward", dt), {unsigned(rows)}, {256}, 0, {&x, &tokens, &table, &C});
}

void embedding_backward(Gpu& gpu, DType dt, Ptr dtable, Ptr tokens, Ptr dx, int rows, int C) {
  gpu.launch(ops::kernel("embedding_backward", dt), {unsigned(rows)}, {256}, 0, {&dtable, &tokens, &dx, &C});
}

}  // namespace ca::nn_cuda
