// SwiGLU: act = T(silu(gate)) * up, forward and backward (memory bound).
// The device half of the swiglu family: its launchers and the name expressions they register are in
// ops/swiglu.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// ---- SwiGLU: act = T(silu(gate)) * up (HF rounds the silu to the dtype before the product) ----
template <class T> __global__ void swiglu_forward(T* act, const T* gate, const T* up, int ld_in, int F) {
  const long long t = blockIdx.x;
  for (int f = threadIdx.x; f < F; f += blockDim.x) {
    float g = to_f(gate[t * ld_in + f]), u = to_f(up[t * ld_in + f]);
    float s = 1.f / (1.f + expf(-g));
    act[t * F + f] = from_f<T>(round_to<T>(g * s) * u);
  }
}
// dgate = dact * up * s (1 + g (1 - s));  dup = dact * silu(g)   (overwrites; dgate/dup rows of stride ld_out)
template <class T> __global__ void swiglu_backward(T* dgate, T* dup, int ld_out, const T* dact, const T* gate,
                                                   const T* up, int ld_in, int F) {
  const long long t = blockIdx.x;
  for (int f = threadIdx.x; f < F; f += blockDim.x) {
    float g = to_f(gate[t * ld_in + f]), u = to_f(up[t * ld_in + f]), da = to_f(dact[t * F + f]);
    float s = 1.f / (1.f + expf(-g));
    dgate[t * ld_out + f] = from_f<T>(da * u * s * (1.f + g * (1.f - s)));
    dup[t * ld_out + f] = from_f<T>(da * g * s);
  }
}
