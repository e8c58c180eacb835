// SwiGLU on the GPU: swiglu_forward, swiglu_backward (declared in libcommon/nn_cuda/ops.hpp).
//   CPU twin  ca::nn::swiglu_forward, ca::nn::swiglu_backward (libcommon/nn/ops.hpp)
//   test      tests/nn_cuda/ops/swiglu_test.cpp
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> swiglu_kernels() { return for_both_dtypes({"swiglu_forward", "swiglu_backward"}); }

}  // namespace ops

void swiglu_forward(Gpu& gpu, DType dt, Ptr act, Ptr gate, Ptr up, int ld_in, int rows, int F) {
  gpu.launch(ops::kernel("swiglu_forward", dt), {unsigned(rows)}, {256}, 0, {&act, &gate, &up, &ld_in, &F});
}

void swiglu_backward(Gpu& gpu, DType dt, Ptr dgate, Ptr dup, int ld_out, Ptr dact, Ptr gate, Ptr up, int ld_in, int rows,
                     int F) {
  gpu.launch(ops::kernel("swiglu_backward", dt), {unsigned(rows)}, {256}, 0,
             {&dgate, &dup, &ld_out, &dact, &gate, &up, &ld_in, &F});
}

}  // namespace ca::nn_cuda
