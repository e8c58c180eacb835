// RMSNorm, one block per row (memory bound); the weight's gradient is matmul.cu's column_sum_add.
// The device half of the rmsnorm family: its launchers and the name expressions they register are in
// ops/rmsnorm.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// ---- RMSNorm, one block per row (memory bound) ----
// y = w * T(x * rstd): HF's Qwen2RMSNorm rounds the normalized row to the input dtype before the weight.
template <class T> __global__ void rmsnorm_forward(T* y, float* rstd, const T* x, const T* w, int C, float eps) {
  const long long t = blockIdx.x;
  const T* xr = x + t * C;
  float ss = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float v = to_f(xr[c]);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float r = rsqrtf(ss / C + eps);
  if (threadIdx.x == 0) rstd[t] = r;
  for (int c = threadIdx.x; c < C; c += blockDim.x) y[t * C + c] = from_f<T>(to_f(w[c]) * round_to<T>(to_f(xr[c]) * r));
}
// dx += r * (dy*w - x * r^2 / C * sum(dy*w*x))   (the weight's gradient: column_sum_add)
template <class T> __global__ void rmsnorm_backward(T* dx, const T* dy, const T* x, const T* w, const float* rstd, int C) {
  const long long t = blockIdx.x;
  const T* xr = x + t * C;
  const T* g = dy + t * C;
  const float r = rstd[t];
  float dot = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dot += to_f(g[c]) * to_f(w[c]) * to_f(xr[c]);
  dot = block_sum(dot);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float d = r * (to_f(g[c]) * to_f(w[c]) - to_f(xr[c]) * r * r * dot / C);
    dx[t * C + c] = from_f<T>(to_f(dx[t * C + c]) + d);
  }
}
