// The token embedding: a gather forward, a scatter-add backward (memory bound).
// The device half of the embedding family: its launchers and the name expressions they register are in
// ops/embedding.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// ---- embedding: x[t, :] = table[tokens[t], :] ----
template <class T> __global__ void embedding_forward(T* x, const int* tokens, const T* table, int C) {
  int t = blockIdx.x;
  const T* row = table + (long long)tokens[t] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) x[(long long)t * C + c] = row[c];
}
// dtable[tokens[t], :] += dx[t, :]  (atomics: a token can repeat)
template <class T> __global__ void embedding_backward(float* dtable, const int* tokens, const T* dx, int C) {
  int t = blockIdx.x;
  float* row = dtable + (long long)tokens[t] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(row + c, to_f(dx[(long long)t * C + c]));
}
