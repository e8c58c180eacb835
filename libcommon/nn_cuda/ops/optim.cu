// The optimizer: gradient norm, scaling, AdamW.
// The device half of the optim family: its launchers and the name expressions they register are in
// ops/optim.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// ---- optimizer ----
// sum of squares into a double accumulator (global gradient norm)
__global__ void sum_squares(double* out, const float* x, long long n) {
  float s = 0.f;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    s += x[i] * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(out, (double)s);
}
__global__ void scale_inplace(float* x, long long n, float alpha) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= alpha;
}
// torch.optim.AdamW on fp32 master weights; `copy` (bf16 compute weights) is refreshed when not null.
// 1 - beta comes from the host in double: in fp32, 1.f - 0.999f is 4.7e-5 off in relative terms.
template <class T> __global__ void adamw_step(float* w, const float* g, float* m, float* v, T* copy, long long n, float lr,
                                              float beta1, float beta2, float one_minus_beta1, float one_minus_beta2,
                                              float eps, float weight_decay, float bc1, float bc2) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i];
  float mi = beta1 * m[i] + one_minus_beta1 * gi;
  float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
  m[i] = mi;
  v[i] = vi;
  float wi = w[i] * (1.f - lr * weight_decay);
  wi -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
  w[i] = wi;
  if (copy) copy[i] = from_f<T>(wi);
}
