// The CPU side of libcommon/nn_cuda: dtype names, and that without a driver the GPU runtime stops with
// an EnvironmentError (exit 3 in a tool) instead of crashing or pretending.
#include <doctest/doctest.h>

#include <algorithm>

#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/gpu.hpp"
#include "libcommon/nn_cuda/kernels.hpp"

using namespace ca::nn_cuda;

TEST_CASE("dtype names") {
  CHECK(parse_dtype("bf16") == DType::BF16);
  CHECK(parse_dtype("float32") == DType::F32);
  CHECK_THROWS_AS(parse_dtype("fp8"), ca::InputError);
  CHECK(dtype_size(DType::BF16) == 2);
}

TEST_CASE("every launched kernel has a name expression, attention for each head size") {
  auto names = kernel_names();
  CHECK(std::find(names.begin(), names.end(), "rmsnorm_forward<__nv_bfloat16>") != names.end());
  CHECK(std::find(names.begin(), names.end(), attention_name("attention_backward_dkv", "float", 128)) != names.end());
  CHECK(attention_name("attention_forward", "float", 64) == "attention_forward<float, 64, 64, 32>");
}

TEST_CASE("without a driver the GPU runtime says so with an EnvironmentError") {
  std::string why;
  if (!ca::cuda::Driver::available(&why)) {
    CHECK_THROWS_AS(Gpu(0), ca::EnvironmentError);
  } else {
    MESSAGE("a CUDA driver is present: the GPU tests (label gpu) cover this machine");
    CHECK_THROWS_AS(Gpu(1 << 20), ca::EnvironmentError);  // a GPU that does not exist
  }
}
