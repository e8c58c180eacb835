// The matmul family (libcommon/nn_cuda/ops/matmul.cpp: cuBLASLt, and the bias gradient's column sums)
// against its CPU twin ca::nn::matmul_forward / matmul_backward.
#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

TEST_CASE("matmul forward and backward (cuBLASLt) match the CPU loops") {
  std::mt19937_64 rng(1);
  struct Shape { int rows, K, N; };
  for (DType dt : kDTypes)
    for (Shape s : {Shape{1, 16, 8}, Shape{7, 32, 64}, Shape{64, 128, 96}, Shape{130, 256, 264}, Shape{5, 24, 1}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(s.rows);
      CAPTURE(s.K);
      CAPTURE(s.N);
      auto in = as_dtype(randn(std::size_t(s.rows) * s.K, rng), dt);
      auto w = as_dtype(randn(std::size_t(s.N) * s.K, rng, 0.1), dt);
      auto bias = as_dtype(randn(s.N, rng), dt);
      auto res = as_dtype(randn(std::size_t(s.rows) * s.N, rng), dt);
      std::vector<double> want(std::size_t(s.rows) * s.N), want_nb(want.size());
      auto in_d = to_double(in), w_d = to_double(w), b_d = to_double(bias);
      nn::matmul_forward(want.data(), in_d.data(), w_d.data(), b_d.data(), s.rows, s.K, s.N);
      nn::matmul_forward(want_nb.data(), in_d.data(), w_d.data(), nullptr, s.rows, s.K, s.N);
      Buffer in_g = to_device(gpu(), in, dt), w_g = to_device(gpu(), w, dt), b_g = to_device(gpu(), bias, dt);
      Buffer out_g(gpu(), want.size() * es(dt));
      matmul_forward(gpu(), dt, out_g.ptr(), in_g.ptr(), w_g.ptr(), b_g.ptr(), s.rows, s.K, s.N);
      CHECK_NMSE(to_host(gpu(), out_g.ptr(), want.size(), dt), want, bound(dt));
      // residual folded in: out = res + in w^T
      Buffer res_g = to_device(gpu(), res, dt);
      matmul_forward(gpu(), dt, out_g.ptr(), in_g.ptr(), w_g.ptr(), 0, s.rows, s.K, s.N, res_g.ptr());
      std::vector<double> want_res(want.size());
      for (std::size_t i = 0; i < want.size(); ++i) want_res[i] = want_nb[i] + res[i];
      CHECK_NMSE(to_host(gpu(), out_g.ptr(), want.size(), dt), want_res, bound(dt));

      // backward: din accumulates onto a start value, dw and dbias accumulate in fp32
      auto dout = as_dtype(randn(want.size(), rng), dt);
      auto din0 = as_dtype(randn(in.size(), rng), dt);
      auto dw0 = randn(w.size(), rng), db0 = randn(bias.size(), rng);
      std::vector<double> din(din0.begin(), din0.end()), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
      auto dout_d = to_double(dout);
      nn::matmul_backward(din.data(), dw.data(), db.data(), dout_d.data(), in_d.data(), w_d.data(), s.rows, s.K, s.N);
      Buffer dout_g = to_device(gpu(), dout, dt), din_g = to_device(gpu(), din0, dt);
      Buffer dw_g = to_device(gpu(), dw0, DType::F32), db_g = to_device(gpu(), db0, DType::F32);
      matmul_backward(gpu(), dt, din_g.ptr(), true, dw_g.ptr(), db_g.ptr(), dout_g.ptr(), in_g.ptr(), w_g.ptr(), s.rows,
                      s.K, s.N);
      CHECK_NMSE(to_host(gpu(), din_g.ptr(), din.size(), dt), din, bound(dt));
      CHECK_NMSE(to_host(gpu(), dw_g.ptr(), dw.size(), DType::F32), dw, bound(dt));
      CHECK_NMSE(to_host(gpu(), db_g.ptr(), db.size(), DType::F32), db, bound(dt));
    }
}
