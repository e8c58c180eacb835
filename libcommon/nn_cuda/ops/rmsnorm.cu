// Memory-bound kernels: conversions and copies, embedding, RMSNorm, RoPE, SwiGLU.
// Part of the native transformer's kernels (libcommon/nn_cuda/kernels.hpp lists what is launched;
// gpu.cpp and ops.cpp launch them). Compiled by NVRTC at run time as one translation unit with the
// other .cu files here; embedded in the binaries at build time (CMake, kernel_sources.cpp.in).
#include "libcommon/nn_cuda/kernels/common.cuh"

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
