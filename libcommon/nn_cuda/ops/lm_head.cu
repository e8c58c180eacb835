// The LM head: log-probability of the target token and the entropy.
// The device half of the lm_head family: its launchers and the name expressions they register are in
// ops/lm_head.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// ---- LM head: log-softmax of logits / temperature at the target, and the entropy, one block per row ----
// lse is kept for the backward. Rows with target < 0 get logprob 0 (masked).
template <class T> __global__ void token_logprob_forward(float* logprob, float* entropy, float* lse_out, const T* logits,
                                                         const int* targets, int V, float inv_temp) {
  const long long t = blockIdx.x;
  const T* z = logits + t * V;
  float mx = kNegInf;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, to_f(z[j]) * inv_temp);
  mx = block_max(mx);
  float se = 0.f, sez = 0.f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float zj = to_f(z[j]) * inv_temp, e = expf(zj - mx);
    se += e;
    sez += e * (zj - mx);
  }
  se = block_sum(se);
  sez = block_sum(sez);
  if (threadIdx.x == 0) {
    const float lse = mx + logf(se);
    const int y = targets[t];
    logprob[t] = y >= 0 ? to_f(z[y]) * inv_temp - lse : 0.f;
    entropy[t] = logf(se) - sez / se;  // H = lse - E[z] with z shifted by mx
    lse_out[t] = lse;
  }
}
// dlogits[t, j] = (c_lp (delta_jy - p_j) - c_ent p_j (log p_j + H)) / tau. Overwrites; dlogits may be logits.
template <class T> __global__ void token_logprob_backward(T* dlogits, const T* logits, const int* targets,
                                                          const float* lse, const float* entropy, const float* c_lp,
                                                          const float* c_ent, int V, float inv_temp) {
  const long long t = blockIdx.x;
  const float L = lse[t], Hh = entropy[t], a = c_lp[t], b = c_ent[t];
  const int y = targets[t];
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float lp = to_f(logits[t * V + j]) * inv_temp - L, p = expf(lp);
    float g = a * ((j == y ? 1.f : 0.f) - p) - b * p * (lp + Hh);
    dlogits[t * V + j] = from_f<T>(g * inv_temp);
  }
}
