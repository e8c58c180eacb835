// The optimizer on the GPU: l2_norm, scale (gradient clipping) and adamw_step (declared in
// libcommon/nn_cuda/ops.hpp).
//   CPU twin  ca::nn::clip_grad_norm, ca::nn::AdamW::step (libcommon/nn/optim.hpp)
//   test      tests/nn_cuda/ops/optim_test.cpp
#include <algorithm>
#include <cmath>

#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
// adamw_step<float> is built too, though only the bf16-copy instantiation is launched.
std::vector<std::string> optim_kernels() {
  std::vector<std::string> names = for_both_dtypes({"adamw_step"});
  names.push_back("sum_squares");
  names.push_back("scale_inplace");
  return names;
}

}  // namespace ops

double l2_norm(Gpu& gpu, Ptr x, std::size_t n) {
  Buffer acc(gpu, sizeof(double));
  gpu.memset0(acc.ptr(), sizeof(double));
  long long nn = (long long)n;
  Ptr a = acc.ptr();
  unsigned blocks = std::min<unsigned>(1024, std::max<unsigned>(1, ops::cdiv(nn, 256)));
  gpu.launch("sum_squares", {blocks}, {256}, 0, {&a, &x, &nn});
  double ss = 0;
  gpu.download(&ss, acc.ptr(), sizeof(double));
  return std::sqrt(ss);
}

void scale(Gpu& gpu, Ptr x, std::size_t n, float alpha) {
  long long nn = (long long)n;
  gpu.launch("scale_inplace", {ops::cdiv(nn, 256)}, {256}, 0, {&x, &nn, &alpha});
}

void adamw_step(Gpu& gpu, Ptr w, Ptr g, Ptr m, Ptr v, Ptr copy_bf16, std::size_t n, double lr, double beta1, double beta2,
                double eps, double weight_decay, long long t) {
  long long nn = (long long)n;
  float flr = float(lr), b1 = float(beta1), b2 = float(beta2), e = float(eps), wd = float(weight_decay);
  float omb1 = float(1.0 - beta1), omb2 = float(1.0 - beta2);
  float bc1 = float(1.0 - std::pow(beta1, double(t))), bc2 = float(1.0 - std::pow(beta2, double(t)));
  gpu.launch("adamw_step<__nv_bfloat16>", {ops::cdiv(nn, 256)}, {256}, 0,
             {&w, &g, &m, &v, &copy_bf16, &nn, &flr, &b1, &b2, &omb1, &omb2, &e, &wd, &bc1, &bc2});
}

}  // namespace ca::nn_cuda
