// Conversions and strided copies (memory bound).
// The device half of the copy family: its launchers and the name expressions they register are in
// ops/copy.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// ---- conversions and copies (memory bound) ----
template <class To, class From> __global__ void convert(To* out, const From* in, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_f<To>(to_f(in[i]));
}
// dst[r, c] = src[r, c] for a [rows, cols] block with row strides ldd / lds.
template <class T> __global__ void copy_rows(T* dst, int ldd, const T* src, int lds, int rows, int cols) {
  int r = blockIdx.x;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[(long long)r * ldd + c] = src[(long long)r * lds + c];
}
