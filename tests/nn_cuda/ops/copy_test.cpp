// The copy family (libcommon/nn_cuda/ops/copy.cpp) against its CPU twin: a strided row copy spelled
// out here, and ca::float_to_bf16 / bf16_to_float (libcommon/safetensors.hpp) for the conversions.
// Both are exact, so the bound is 0.
#include <tuple>

#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;

TEST_CASE("copy_rows copies a block between strided matrices and leaves the rest of the rows alone") {
  std::mt19937_64 rng(9);
  for (DType dt : kDTypes)
    for (auto [rows, cols, lds, ldd] : {std::tuple{1, 1, 1, 1}, std::tuple{7, 100, 130, 104}, std::tuple{33, 300, 300, 512}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(rows);
      CAPTURE(cols);
      auto src = as_dtype(randn(std::size_t(rows) * lds, rng), dt);
      auto dst = as_dtype(randn(std::size_t(rows) * ldd, rng), dt);
      std::vector<double> want = to_double(dst);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) want[std::size_t(r) * ldd + c] = src[std::size_t(r) * lds + c];
      Buffer src_g = to_device(gpu(), src, dt), dst_g = to_device(gpu(), dst, dt);
      copy_rows(gpu(), dt, dst_g.ptr(), ldd, src_g.ptr(), lds, rows, cols);
      CHECK_NMSE(to_host(gpu(), dst_g.ptr(), want.size(), dt), want, 0.0);
    }
}

TEST_CASE("convert rounds fp32 to bf16 to nearest even, widens bf16 exactly, and copies a dtype to itself") {
  std::mt19937_64 rng(10);
  const std::size_t n = 1000;  // not a multiple of the 256-thread block
  auto x = randn(n, rng, 10.0);
  auto rounded = as_dtype(x, DType::BF16);  // the host's round to nearest even
  Buffer f32 = to_device(gpu(), x, DType::F32), bf16(gpu(), n * 2), back(gpu(), n * 4), same(gpu(), n * 4);
  convert(gpu(), DType::BF16, bf16.ptr(), DType::F32, f32.ptr(), n);
  CHECK_NMSE(to_host(gpu(), bf16.ptr(), n, DType::BF16), rounded, 0.0);
  convert(gpu(), DType::F32, back.ptr(), DType::BF16, bf16.ptr(), n);
  CHECK_NMSE(to_host(gpu(), back.ptr(), n, DType::F32), rounded, 0.0);
  convert(gpu(), DType::F32, same.ptr(), DType::F32, f32.ptr(), n);
  CHECK_NMSE(to_host(gpu(), same.ptr(), n, DType::F32), x, 0.0);
}
