// What the launchers of ops/*.cpp share (host side; common.cuh is the device side): a kernel's name
// expression for a dtype, a family's instantiations for both dtypes, grid sizes, and the column sums
// of matmul.cu that two families launch.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "libcommon/nn_cuda/ops.hpp"

namespace ca::nn_cuda::ops {

// "rmsnorm_forward<__nv_bfloat16>": the name expression of kernel template `name` for element type dt,
// as Gpu::launch takes it.
inline std::string kernel(const char* name, DType dt) { return std::string(name) + "<" + dtype_cpp(dt) + ">"; }
// Each of `names` for float and for __nv_bfloat16: what a family's <family>_kernels() returns for
// kernels templated on T alone.
inline std::vector<std::string> for_both_dtypes(std::initializer_list<const char*> names) {
  std::vector<std::string> out;
  for (DType dt : {DType::F32, DType::BF16})
    for (const char* name : names) out.push_back(kernel(name, dt));
  return out;
}
inline unsigned cdiv(long long a, long long b) { return unsigned((a + b - 1) / b); }

// out[c] (fp32) += sum_r a[r, c] * (b ? b[r, c] : 1) * (rowscale ? rowscale[r] : 1) over [rows, cols]
// (row stride cols): a linear layer's bias gradient (matmul.cpp) and RMSNorm's weight gradient
// (rmsnorm.cpp). matmul.cu's column_sum_add, 256 columns and kColumnRows rows per block (atomics).
constexpr int kColumnRows = 64;
void column_sum_add(Gpu& gpu, DType dt, Ptr out, Ptr a, Ptr b, Ptr rowscale, int rows, int cols);

}  // namespace ca::nn_cuda::ops
