// Column sums for the gradients the GEMMs do not give: a linear layer's bias, RMSNorm's weight
// (the matrix products themselves are cuBLASLt's, ops/matmul.cpp).
// The device half of the matmul family: its launchers and the name expressions they register are in
// ops/matmul.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// out[c] += sum_r a[r, c] * (b ? b[r, c] : 1) * (rowscale ? rowscale[r] : 1), rows split over blockIdx.y.
// Bias gradients (b, rowscale null) and RMSNorm weight gradients (b = x, rowscale = rstd).
template <class T> __global__ void column_sum_add(float* out, const T* a, const T* b, const float* rowscale, int rows,
                                                  int cols, int ld, int rows_per_block) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  int r0 = blockIdx.y * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  float s = 0.f;
  for (int r = r0; r < r1; ++r) {
    float v = to_f(a[(long long)r * ld + c]);
    if (b) v *= to_f(b[(long long)r * ld + c]);
    if (rowscale) v *= rowscale[r];
    s += v;
  }
  atomicAdd(out + c, s);
}
