// The rmsnorm family (libcommon/nn_cuda/ops/rmsnorm.cpp) against its CPU twin
// ca::nn::rmsnorm_forward / rmsnorm_backward.
#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

TEST_CASE("rmsnorm forward and backward") {
  std::mt19937_64 rng(2);
  for (DType dt : kDTypes)
    for (auto [rows, C] : {std::pair{1, 64}, std::pair{17, 96}, std::pair{64, 1000}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(rows);
      CAPTURE(C);
      auto x = as_dtype(randn(std::size_t(rows) * C, rng, 2.0), dt);
      auto w = as_dtype(randn(C, rng), dt);
      std::vector<double> y(x.size()), rstd(rows);
      auto x_d = to_double(x), w_d = to_double(w);
      nn::rmsnorm_forward(y.data(), rstd.data(), x_d.data(), w_d.data(), rows, C, 1e-6);
      Buffer x_g = to_device(gpu(), x, dt), w_g = to_device(gpu(), w, dt);
      Buffer y_g(gpu(), x.size() * es(dt)), r_g(gpu(), rows * 4);
      rmsnorm_forward(gpu(), dt, y_g.ptr(), r_g.ptr(), x_g.ptr(), w_g.ptr(), rows, C, 1e-6f);
      CHECK_NMSE(to_host(gpu(), y_g.ptr(), y.size(), dt), y, bound(dt));
      CHECK_NMSE(to_host(gpu(), r_g.ptr(), rows, DType::F32), rstd, 1e-10);

      auto dy = as_dtype(randn(x.size(), rng), dt);
      auto dx0 = as_dtype(randn(x.size(), rng), dt);
      auto dw0 = randn(C, rng);
      std::vector<double> dx(dx0.begin(), dx0.end()), dw(dw0.begin(), dw0.end());
      auto dy_d = to_double(dy);
      nn::rmsnorm_backward(dx.data(), dw.data(), dy_d.data(), x_d.data(), w_d.data(), rstd.data(), rows, C);
      Buffer dy_g = to_device(gpu(), dy, dt), dx_g = to_device(gpu(), dx0, dt), dw_g = to_device(gpu(), dw0, DType::F32);
      rmsnorm_backward(gpu(), dt, dx_g.ptr(), dw_g.ptr(), dy_g.ptr(), x_g.ptr(), w_g.ptr(), r_g.ptr(), rows, C);
      CHECK_NMSE(to_host(gpu(), dx_g.ptr(), dx.size(), dt), dx, bound(dt));
      CHECK_NMSE(to_host(gpu(), dw_g.ptr(), dw.size(), DType::F32), dw, bound(dt));
    }
}
