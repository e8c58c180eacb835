// Rotary position embedding in place (HF rotate_half), forward and backward.
// The device half of the rope family: its launchers and the name expressions they register are in
// ops/rope.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

// ---- RoPE in place (HF rotate_half): pairs (i, i + D/2) of each head turn by (pos0 + t) * theta^(-2i/D) ----
// cos_t / sin_t: [max_pos, D/2] tables computed on the host in double. inverse = 1 turns back (the backward).
template <class T> __global__ void rope(T* x, int ld, int heads, int D, const float* cos_t, const float* sin_t,
                                        int pos0, int inverse) {
  const int t = blockIdx.x, half = D / 2;
  const int pos = pos0 + t;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    int h = idx / half, i = idx % half;
    T* p = x + (long long)t * ld + h * D;
    float c = cos_t[(long long)pos * half + i], s = sin_t[(long long)pos * half + i];
    if (inverse) s = -s;
    float a = to_f(p[i]), b = to_f(p[i + half]);
    p[i] = from_f<T>(a * c - b * s);
    p[i + half] = from_f<T>(b * c + a * s);
  }
}
