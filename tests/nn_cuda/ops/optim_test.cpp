// The optim family (libcommon/nn_cuda/ops/optim.cpp) against its CPU twin ca::nn::clip_grad_norm and
// ca::nn::AdamW (libcommon/nn/optim.hpp).
#include "libcommon/nn/optim.hpp"
#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;

TEST_CASE("AdamW with fp32 master weights and gradient clipping match the CPU optimizer") {
  std::mt19937_64 rng(8);
  const std::size_t n = 10007;
  auto w = randn(n, rng), g = randn(n, rng);
  std::vector<double> w_d(w.begin(), w.end()), g_d(g.begin(), g.end());
  ca::nn::AdamW cpu(n);
  ca::nn::AdamWConfig c;
  c.lr = 1e-3;
  c.weight_decay = 0.1;
  Buffer w_g = to_device(gpu(), w, DType::F32), g_g = to_device(gpu(), g, DType::F32);
  Buffer m_g(gpu(), n * 4), v_g(gpu(), n * 4), copy_g(gpu(), n * 2);
  gpu().memset0(m_g.ptr(), n * 4);
  gpu().memset0(v_g.ptr(), n * 4);
  double norm = l2_norm(gpu(), g_g.ptr(), n);
  double cpu_norm = ca::nn::clip_grad_norm(g_d, 50.0);
  CHECK(std::abs(norm - cpu_norm) <= 1e-5 * cpu_norm);
  scale(gpu(), g_g.ptr(), n, float(50.0 / (norm + 1e-6)));
  for (int t = 1; t <= 3; ++t) {
    cpu.step(w_d, g_d, c);
    adamw_step(gpu(), w_g.ptr(), g_g.ptr(), m_g.ptr(), v_g.ptr(), copy_g.ptr(), n, c.lr, c.beta1, c.beta2, c.eps,
               c.weight_decay, t);
  }
  auto w_after = to_host(gpu(), w_g.ptr(), n, DType::F32);
  CHECK_NMSE(w_after, w_d, 1e-10);
  CHECK_NMSE(to_host(gpu(), m_g.ptr(), n, DType::F32), cpu.m, 1e-10);
  CHECK_NMSE(to_host(gpu(), v_g.ptr(), n, DType::F32), cpu.v, 1e-10);
  CHECK_NMSE(to_host(gpu(), copy_g.ptr(), n, DType::BF16), w_after, bound(DType::BF16));
}
