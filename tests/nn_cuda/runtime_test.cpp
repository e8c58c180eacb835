// The CPU side of libcommon/nn_cuda: dtype names, and that without a driver the GPU runtime stops with
// an EnvironmentError (exit 3 in a tool) instead of crashing or pretending.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/gpu.hpp"
#include "libcommon/nn_cuda/kernels.hpp"
#include "libcommon/nn_cuda/ops/attention.hpp"

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

namespace {
// The kernels the sources define: the identifier after each `__global__ void` (and its
// __launch_bounds__(...), if any).
std::set<std::string> defined_kernels() {
  std::set<std::string> out;
  for (const auto& [path, text] : kernel_sources()) {
    const std::string key = "__global__ void ";
    for (auto at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
      std::size_t i = at + key.size();
      if (text.compare(i, 18, "__launch_bounds__(") == 0) i = text.find(')', i) + 2;
      std::size_t j = i;
      while (j < text.size() && (std::isalnum((unsigned char)text[j]) || text[j] == '_')) ++j;
      out.insert(text.substr(i, j - i));
    }
  }
  return out;
}
}  // namespace

// The families' name expressions (ops/<family>.cpp) and their kernels (ops/<family>.cu) agree: no
// name twice, none for a kernel that no .cu defines, no kernel that no family launches. (That each
// name compiles and resolves is nn_cuda_compile's, which needs NVRTC.)
TEST_CASE("every registered name is a kernel of ops/*.cu and every kernel there is registered") {
  auto names = kernel_names();
  std::set<std::string> unique(names.begin(), names.end());
  CHECK(unique.size() == names.size());
  for (const auto& [path, text] : kernel_sources()) {
    CAPTURE(path);
    CHECK(path.rfind("libcommon/nn_cuda/ops/", 0) == 0);
  }
  const std::set<std::string> defined = defined_kernels();
  CHECK(defined.size() >= 20);
  std::set<std::string> registered;
  for (const auto& n : names) registered.insert(n.substr(0, n.find('<')));
  for (const auto& n : registered) {
    CAPTURE(n);
    CHECK(defined.count(n) == 1);
  }
  for (const auto& k : defined) {
    CAPTURE(k);
    CHECK(registered.count(k) == 1);
  }
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
