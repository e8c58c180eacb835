// The LM head's loss terms on the GPU: token_logprob_forward, token_logprob_backward (declared in
// libcommon/nn_cuda/ops.hpp): per row, log-softmax at the target and the entropy, and their gradient.
//   CPU twin  ca::nn::token_logprob_entropy, ca::nn::token_head_backward (libcommon/nn/model.hpp)
//   test      tests/nn_cuda/ops/lm_head_test.cpp
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> lm_head_kernels() {
  return for_both_dtypes({"token_logprob_forward", "token_logprob_backward"});
}

}  // namespace ops

void token_logprob_forward(Gpu& gpu, DType dt, Ptr logprob, Ptr entropy, Ptr lse, Ptr logits, Ptr targets, int rows,
                           int V, double temperature) {
  float inv = float(1.0 / temperature);
  gpu.launch(ops::kernel("token_logprob_forward", dt), {unsigned(rows)}, {512}, 0,
             {&logprob, &entropy, &lse, &logits, &targets, &V, &inv});
}

void token_logprob_backward(Gpu& gpu, DType dt, Ptr dlogits, Ptr logits, Ptr targets, Ptr lse, Ptr entropy, Ptr c_lp,
                            Ptr c_ent, int rows, int V, double temperature) {
  float inv = float(1.0 / temperature);
  gpu.launch(ops::kernel("token_logprob_backward", dt), {unsigned(rows)}, {512}, 0,
             {&dlogits, &logits, &targets, &lse, &entropy, &c_lp, &c_ent, &V, &inv});
}

}  // namespace ca::nn_cuda
