// What every op family's test in tests/nn_cuda/ops/ shares (ggml's test-backend-ops: each GPU op
// against its CPU twin, computed in double from the same inputs, on random inputs of several shapes,
// in fp32 and bf16; the normalized error nmse = sum((gpu - cpu)^2) / sum(cpu^2) stays under the
// dtype's bound). The files here make one binary, nn_cuda_ops (label gpu); a new <family>_test.cpp
// joins it at the next configure, and libcommon/nn_cuda/ops/<family>.cpp cannot be built without one.
#pragma once
#include <vector>

#include "libcommon/nn/ops.hpp"
#include "libcommon/nn_cuda/ops.hpp"
#include "tests/nn_cuda/common.hpp"

namespace nn_cuda_test {

inline constexpr DType kDTypes[] = {DType::F32, DType::BF16};

inline Buffer ints_to_device(Gpu& g, const std::vector<int>& v) {
  Buffer b(g, v.size() * 4);
  g.upload(b.ptr(), v.data(), v.size() * 4);
  return b;
}
inline std::size_t es(DType dt) { return dtype_size(dt); }  // bytes per element

}  // namespace nn_cuda_test
