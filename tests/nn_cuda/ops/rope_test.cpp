// The rope family (libcommon/nn_cuda/ops/rope.cpp) against its CPU twin ca::nn::rope_forward /
// rope_backward.
#include <tuple>

#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

TEST_CASE("rope forward and backward, strided rows, offset positions") {
  std::mt19937_64 rng(3);
  for (DType dt : kDTypes)
    for (auto [rows, heads, D, pos0] : {std::tuple{1, 1, 16, 0}, std::tuple{9, 3, 32, 5}, std::tuple{40, 4, 64, 100},
                                        std::tuple{8, 2, 128, 2000}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(D);
      const double theta = 1e6;
      const int ld = heads * D + 8;  // a wider row, as q inside the fused qkv
      RopeTable table(gpu(), 2048 + 16, D, theta);
      auto x = as_dtype(randn(std::size_t(rows) * ld, rng), dt);
      std::vector<double> want = to_double(x), back = to_double(x);
      for (int t = 0; t < rows; ++t)
        for (int h = 0; h < heads; ++h) {
          nn::rope_forward(want.data() + std::size_t(t) * ld + h * D, pos0 + t, D, theta);
          nn::rope_backward(back.data() + std::size_t(t) * ld + h * D, pos0 + t, D, theta);
        }
      Buffer a = to_device(gpu(), x, dt), b = to_device(gpu(), x, dt);
      rope(gpu(), dt, a.ptr(), ld, rows, heads, D, table, pos0, false);
      rope(gpu(), dt, b.ptr(), ld, rows, heads, D, table, pos0, true);
      CHECK_NMSE(to_host(gpu(), a.ptr(), x.size(), dt), want, bound(dt));
      CHECK_NMSE(to_host(gpu(), b.ptr(), x.size(), dt), back, bound(dt));
    }
}
