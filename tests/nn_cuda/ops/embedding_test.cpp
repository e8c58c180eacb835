// The embedding family (libcommon/nn_cuda/ops/embedding.cpp) against the gather and scatter-add the
// CPU model does (spelled out here).
#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;

TEST_CASE("embedding forward and backward (repeated tokens accumulate)") {
  std::mt19937_64 rng(7);
  for (DType dt : kDTypes) {
    const int V = 50, C = 96, rows = 40;
    auto table = as_dtype(randn(std::size_t(V) * C, rng), dt);
    std::vector<int> tokens(rows);
    for (auto& t : tokens) t = int(rng() % 7);  // many repeats
    auto dx = as_dtype(randn(std::size_t(rows) * C, rng), dt);
    std::vector<double> x(std::size_t(rows) * C), dtable(table.size(), 0.0);
    for (int t = 0; t < rows; ++t)
      for (int c = 0; c < C; ++c) {
        x[std::size_t(t) * C + c] = table[std::size_t(tokens[t]) * C + c];
        dtable[std::size_t(tokens[t]) * C + c] += dx[std::size_t(t) * C + c];
      }
    Buffer tab_g = to_device(gpu(), table, dt), tok_g = ints_to_device(gpu(), tokens), x_g(gpu(), x.size() * es(dt));
    embedding_forward(gpu(), dt, x_g.ptr(), tok_g.ptr(), tab_g.ptr(), rows, C);
    CHECK_NMSE(to_host(gpu(), x_g.ptr(), x.size(), dt), x, 0.0);
    Buffer dx_g = to_device(gpu(), dx, dt), dt_g(gpu(), dtable.size() * 4);
    gpu().memset0(dt_g.ptr(), dtable.size() * 4);
    embedding_backward(gpu(), dt, dt_g.ptr(), tok_g.ptr(), dx_g.ptr(), rows, C);
    CHECK_NMSE(to_host(gpu(), dt_g.ptr(), dtable.size(), DType::F32), dtable, 1e-12);
  }
}
