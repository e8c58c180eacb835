// Rotary position embedding on the GPU: RopeTable and rope (declared in libcommon/nn_cuda/ops.hpp).
//   CPU twin  ca::nn::rope_forward, ca::nn::rope_backward (libcommon/nn/ops.hpp)
//   test      tests/nn_cuda/ops/rope_test.cpp
#include <cmath>

#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> rope_kernels() { return for_both_dtypes({"rope"}); }

}  // namespace ops

RopeTable::RopeTable(Gpu& gpu, int max_pos_, int D_, double theta) : max_pos(max_pos_), D(D_) {
  const int half = D / 2;
  std::vector<float> c(std::size_t(max_pos) * half), s(c.size());
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < half; ++i) {
      double angle = p * std::pow(theta, -2.0 * i / D);  // as libcommon/nn/ops.hpp rope_forward
      c[std::size_t(p) * half + i] = float(std::cos(angle));
      s[std::size_t(p) * half + i] = float(std::sin(angle));
    }
  cos = to_device(gpu, c, DType::F32);
  sin = to_device(gpu, s, DType::F32);
}

void rope(Gpu& gpu, DType dt, Ptr x, int ld, int rows, int heads, int D, const RopeTable& table, int pos0, bool inverse) {
  if (table.D != D) throw InternalError("nn_cuda rope: table built for another head size");
  if (pos0 + rows > table.max_pos)
    throw InputError("nn_cuda rope: position " + std::to_string(pos0 + rows - 1) + " beyond the table of " +
                     std::to_string(table.max_pos));
  Ptr c = table.cos.ptr(), s = table.sin.ptr();
  int inv = inverse ? 1 : 0;
  gpu.launch(ops::kernel("rope", dt), {unsigned(rows)}, {128}, 0, {&x, &ld, &heads, &D, &c, &s, &pos0, &inv});
}

}  // namespace ca::nn_cuda
