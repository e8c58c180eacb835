// The swiglu family (libcommon/nn_cuda/ops/swiglu.cpp) against its CPU twin ca::nn::swiglu_forward /
// swiglu_backward.
#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

TEST_CASE("swiglu forward and backward, gate and up strided in one matrix") {
  std::mt19937_64 rng(5);
  for (DType dt : kDTypes)
    for (auto [rows, F] : {std::pair{1, 32}, std::pair{33, 100}, std::pair{64, 1024}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(F);
      auto gu = as_dtype(randn(std::size_t(rows) * 2 * F, rng, 2.0), dt);
      std::vector<double> gate(std::size_t(rows) * F), up(gate.size());
      for (int t = 0; t < rows; ++t)
        for (int f = 0; f < F; ++f) {
          gate[std::size_t(t) * F + f] = gu[std::size_t(t) * 2 * F + f];
          up[std::size_t(t) * F + f] = gu[std::size_t(t) * 2 * F + F + f];
        }
      std::vector<double> act(gate.size());
      nn::swiglu_forward(act.data(), gate.data(), up.data(), gate.size());
      Buffer gu_g = to_device(gpu(), gu, dt), act_g(gpu(), act.size() * es(dt));
      swiglu_forward(gpu(), dt, act_g.ptr(), gu_g.ptr(), gu_g.ptr() + F * es(dt), 2 * F, rows, F);
      CHECK_NMSE(to_host(gpu(), act_g.ptr(), act.size(), dt), act, bound(dt));

      auto dact = as_dtype(randn(act.size(), rng), dt);
      auto dact_d = to_double(dact);
      std::vector<double> dgate(act.size()), dup(act.size());
      nn::swiglu_backward(dgate.data(), dup.data(), dact_d.data(), gate.data(), up.data(), act.size());
      Buffer dact_g = to_device(gpu(), dact, dt), dgu_g(gpu(), gu.size() * es(dt));
      swiglu_backward(gpu(), dt, dgu_g.ptr(), dgu_g.ptr() + F * es(dt), 2 * F, dact_g.ptr(), gu_g.ptr(),
                      gu_g.ptr() + F * es(dt), 2 * F, rows, F);
      auto dgu = to_host(gpu(), dgu_g.ptr(), gu.size(), dt);
      std::vector<float> got_gate(act.size()), got_up(act.size());
      for (int t = 0; t < rows; ++t)
        for (int f = 0; f < F; ++f) {
          got_gate[std::size_t(t) * F + f] = dgu[std::size_t(t) * 2 * F + f];
          got_up[std::size_t(t) * F + f] = dgu[std::size_t(t) * 2 * F + F + f];
        }
      CHECK_NMSE(got_gate, dgate, bound(dt));
      CHECK_NMSE(got_up, dup, bound(dt));
    }
}
