// The lm_head family (libcommon/nn_cuda/ops/lm_head.cpp) against its CPU twin
// ca::nn::token_logprob_entropy / token_head_backward (libcommon/nn/model.hpp).
#include <tuple>

#include "libcommon/nn/model.hpp"
#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

TEST_CASE("token logprob, entropy and their backward (log-softmax with gather)") {
  std::mt19937_64 rng(6);
  for (DType dt : kDTypes)
    for (auto [rows, V, temp] : {std::tuple{1, 50, 1.0}, std::tuple{9, 1000, 0.7}, std::tuple{16, 5003, 1.3}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(V);
      auto z = as_dtype(randn(std::size_t(rows) * V, rng, 3.0), dt);
      std::vector<int> targets(rows);
      for (auto& y : targets) y = int(rng() % V);
      auto c_lp = randn(rows, rng), c_ent = randn(rows, rng);
      auto z_d = to_double(z);
      std::vector<double> lp(rows), ent(rows), dz(z.size(), 0.0);
      for (int t = 0; t < rows; ++t) {
        nn::token_logprob_entropy(z_d.data() + std::size_t(t) * V, V, targets[t], temp, lp[t], ent[t]);
        nn::token_head_backward(z_d.data() + std::size_t(t) * V, V, targets[t], temp, double(c_lp[t]), double(c_ent[t]),
                                dz.data() + std::size_t(t) * V);
      }
      Buffer z_g = to_device(gpu(), z, dt), y_g = ints_to_device(gpu(), targets);
      Buffer lp_g(gpu(), rows * 4), ent_g(gpu(), rows * 4), lse_g(gpu(), rows * 4);
      token_logprob_forward(gpu(), dt, lp_g.ptr(), ent_g.ptr(), lse_g.ptr(), z_g.ptr(), y_g.ptr(), rows, V, temp);
      CHECK_NMSE(to_host(gpu(), lp_g.ptr(), rows, DType::F32), lp, 1e-9);
      CHECK_NMSE(to_host(gpu(), ent_g.ptr(), rows, DType::F32), ent, 1e-9);
      Buffer clp_g = to_device(gpu(), c_lp, DType::F32), cent_g = to_device(gpu(), c_ent, DType::F32);
      // in place, as the model does: dlogits overwrite the logits
      token_logprob_backward(gpu(), dt, z_g.ptr(), z_g.ptr(), y_g.ptr(), lse_g.ptr(), ent_g.ptr(), clp_g.ptr(),
                             cent_g.ptr(), rows, V, temp);
      CHECK_NMSE(to_host(gpu(), z_g.ptr(), z.size(), dt), dz, bound(dt));
    }
}
