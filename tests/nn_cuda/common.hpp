// Shared by the nn_cuda tests: the one GPU, random inputs, bf16 rounding, and the normalized error.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "libcommon/nn_cuda/gpu.hpp"

namespace nn_cuda_test {
using namespace ca::nn_cuda;

// The GPU every test shares (no GPU or driver: EnvironmentError, and the test fails saying so).
inline Gpu& gpu() {
  static Gpu g(0);
  return g;
}

inline std::vector<float> randn(std::size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = float(d(rng));
  return v;
}

// Rounds through the dtype, so the CPU oracle sees the same inputs the GPU does.
inline std::vector<float> as_dtype(std::vector<float> v, DType dt) {
  if (dt == DType::BF16)
    for (auto& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

template <class A, class B> double nmse(const std::vector<A>& got, const std::vector<B>& want) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return den > 0 ? num / den : num;
}

// ggml's bounds: fp32 math about 1e-7; bf16 storage (8 bits of mantissa) about 1e-4.
inline double bound(DType dt) { return dt == DType::F32 ? 1e-7 : 1e-4; }

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

#define CHECK_NMSE(got, want, limit)                                                   \
  do {                                                                                 \
    double e_ = nn_cuda_test::nmse(got, want);                                         \
    INFO(#got << " vs " << #want << ": nmse " << e_ << " (bound " << (limit) << ")"); \
    CHECK(e_ <= (limit));                                                              \
  } while (0)

}  // namespace nn_cuda_test
