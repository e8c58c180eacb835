// The CUDA source of the native transformer's own kernels, compiled at run time by NVRTC (gpu.cpp).
// One kernel per job, in the order the model calls them; T is float or __nv_bfloat16 and every sum is
// accumulated in fp32. Each kernel's CPU twin is the function of the same name in libcommon/nn/ops.hpp.
#include "libcommon/nn_cuda/kernels.hpp"

#include <algorithm>

namespace ca::nn_cuda {

const char* const kKernelSource = R"CUDA(
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
#define kNegInf (-__int_as_float(0x7f800000))

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }
// Rounds to T and back: how an intermediate that HF keeps in T loses precision.
template <class T> __device__ __forceinline__ float round_to(float x) { return to_f(from_f<T>(x)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum (or max) over the block; blockDim.x a multiple of 32. Every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? part[lane] : 0.f;
  r = warp_sum(r);
  __syncthreads();  // `part` is reused by the next call
  return r;
}
__device__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? part[lane] : kNegInf;
  r = warp_max(r);
  __syncthreads();
  return r;
}

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

// ---- causal grouped-query attention, flash style: no [T, T] matrix is ever stored ----
// Query row i (position pos0 + i) of head h sees keys u <= pos0 + i of key/value head h / (H / KV).
// One thread per query row keeps its query and output accumulator in registers; blocks stream tiles
// of keys and values through shared memory (every thread reads the same key: a broadcast), with an
// online softmax rescaled once per tile. fp32 FMA bound; written for clarity, not tensor cores.
// lse[h, i] = log sum_u exp(s_iu) is kept for the backward pass.
template <class T, int D, int BQ, int BK>
__global__ void __launch_bounds__(BQ) attention_forward(T* out, int ldo, float* lse, const T* q, int ldq, const T* k,
                                                        const T* v, int ldkv, int Tq, int Tk, int pos0, int H, int KV,
                                                        float scale) {
  __shared__ float ks[BK][D], vs[BK][D];
  const int h = blockIdx.y, g = h / (H / KV);
  const int i = blockIdx.x * BQ + threadIdx.x;
  const bool active = i < Tq;
  float qr[D], acc[D];
  for (int d = 0; d < D; ++d) {
    qr[d] = active ? to_f(q[(long long)i * ldq + h * D + d]) * scale : 0.f;
    acc[d] = 0.f;
  }
  float m = kNegInf, l = 0.f;
  const int last_row = min(Tq, (int)(blockIdx.x + 1) * BQ) - 1;
  const int kend = min(Tk, pos0 + last_row + 1);  // keys this block needs
  const int my_end = active ? min(Tk, pos0 + i + 1) : 0;
  for (int kb = 0; kb < kend; kb += BK) {
    for (int idx = threadIdx.x; idx < BK * D; idx += BQ) {
      int j = idx / D, d = idx % D;
      bool in = kb + j < Tk;
      ks[j][d] = in ? to_f(k[(long long)(kb + j) * ldkv + g * D + d]) : 0.f;
      vs[j][d] = in ? to_f(v[(long long)(kb + j) * ldkv + g * D + d]) : 0.f;
    }
    __syncthreads();
    const int jn = min(BK, my_end - kb);
    if (jn > 0) {
      float s[BK];
      float tile_max = kNegInf;
      for (int j = 0; j < BK; ++j) {
        if (j < jn) {
          float dot = 0.f;
          for (int d = 0; d < D; ++d) dot += qr[d] * ks[j][d];
          s[j] = dot;
          tile_max = fmaxf(tile_max, dot);
        }
      }
      const float m_new = fmaxf(m, tile_max);
      const float corr = expf(m - m_new);
      l *= corr;
      for (int d = 0; d < D; ++d) acc[d] *= corr;
      for (int j = 0; j < BK; ++j) {
        if (j < jn) {
          float p = expf(s[j] - m_new);
          l += p;
          for (int d = 0; d < D; ++d) acc[d] += p * vs[j][d];
        }
      }
      m = m_new;
    }
    __syncthreads();
  }
  if (active) {
    const float inv = 1.f / l;
    for (int d = 0; d < D; ++d) out[(long long)i * ldo + h * D + d] = from_f<T>(acc[d] * inv);
    lse[(long long)h * Tq + i] = m + logf(l);
  }
}

// delta[h, i] = sum_d dout[i, h, d] * out[i, h, d]: the row term of the softmax backward.
template <class T> __global__ void attention_backward_delta(float* delta, const T* dout, const T* out, int ldo, int Tq,
                                                            int H, int D) {
  const int i = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  for (int h = warp; h < H; h += nwarps) {
    float s = 0.f;
    for (int d = lane; d < D; d += 32) s += to_f(dout[(long long)i * ldo + h * D + d]) * to_f(out[(long long)i * ldo + h * D + d]);
    s = warp_sum(s);
    if (lane == 0) delta[(long long)h * Tq + i] = s;
  }
}

// dq[i] = scale * sum_u p_iu (dp_iu - delta_i) k_u with p_iu = exp(scale q_i.k_u - lse_i), dp_iu = dout_i.v_u.
// One thread per query row: its q and dout rows sit in shared memory (padded by one float so threads
// reading column d of different rows hit different banks), dq in registers; key/value tiles stream by.
template <class T, int D, int BQ, int BK>
__global__ void __launch_bounds__(BQ) attention_backward_dq(T* dq, int lddq, const T* dout, int ldo, const float* lse,
                                                            const float* delta, const T* q, int ldq, const T* k,
                                                            const T* v, int ldkv, int Tq, int Tk, int pos0, int H,
                                                            int KV, float scale) {
  __shared__ float qs[BQ][D + 1], dos[BQ][D + 1];
  __shared__ float ks[BK][D], vs[BK][D];
  const int h = blockIdx.y, g = h / (H / KV);
  const int tid = threadIdx.x, i = blockIdx.x * BQ + tid;
  const bool active = i < Tq;
  for (int idx = tid; idx < BQ * D; idx += BQ) {
    int r = idx / D, d = idx % D, row = blockIdx.x * BQ + r;
    bool in = row < Tq;
    qs[r][d] = in ? to_f(q[(long long)row * ldq + h * D + d]) : 0.f;
    dos[r][d] = in ? to_f(dout[(long long)row * ldo + h * D + d]) : 0.f;
  }
  float acc[D];
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  const float li = active ? lse[(long long)h * Tq + i] : 0.f;
  const float di = active ? delta[(long long)h * Tq + i] : 0.f;
  const int last_row = min(Tq, (int)(blockIdx.x + 1) * BQ) - 1;
  const int kend = min(Tk, pos0 + last_row + 1);
  const int my_end = active ? min(Tk, pos0 + i + 1) : 0;
  __syncthreads();
  for (int kb = 0; kb < kend; kb += BK) {
    for (int idx = tid; idx < BK * D; idx += BQ) {
      int j = idx / D, d = idx % D;
      bool in = kb + j < Tk;
      ks[j][d] = in ? to_f(k[(long long)(kb + j) * ldkv + g * D + d]) : 0.f;
      vs[j][d] = in ? to_f(v[(long long)(kb + j) * ldkv + g * D + d]) : 0.f;
    }
    __syncthreads();
    const int jn = min(BK, my_end - kb);
    for (int j = 0; j < jn; ++j) {
      float s = 0.f, dp = 0.f;
      for (int d = 0; d < D; ++d) {
        s += qs[tid][d] * ks[j][d];
        dp += dos[tid][d] * vs[j][d];
      }
      const float p = expf(s * scale - li);
      const float ds = p * (dp - di);
      for (int d = 0; d < D; ++d) acc[d] += ds * ks[j][d];
    }
    __syncthreads();
  }
  if (active)
    for (int d = 0; d < D; ++d) dq[(long long)i * lddq + h * D + d] = from_f<T>(acc[d] * scale);
}

// dk[u] = scale * sum_{h in group, i} p_iu (dp_iu - delta_i) q_i;  dv[u] = sum_{h in group, i} p_iu dout_i.
// One thread per key row (all query heads of its group, so no atomics); query tiles stream by.
template <class T, int D, int BK, int BQ>
__global__ void __launch_bounds__(BK) attention_backward_dkv(T* dk, T* dv, int lddkv, const T* dout, int ldo,
                                                             const float* lse, const float* delta, const T* q, int ldq,
                                                             const T* k, const T* v, int ldkv, int Tq, int Tk, int pos0,
                                                             int H, int KV, float scale) {
  __shared__ float kself[BK][D + 1], vself[BK][D + 1];
  __shared__ float qs[BQ][D], dos[BQ][D], ls[BQ], dls[BQ];
  const int g = blockIdx.y, group = H / KV;
  const int tid = threadIdx.x, u = blockIdx.x * BK + tid;
  const bool active = u < Tk;
  for (int idx = tid; idx < BK * D; idx += BK) {
    int r = idx / D, d = idx % D, row = blockIdx.x * BK + r;
    bool in = row < Tk;
    kself[r][d] = in ? to_f(k[(long long)row * ldkv + g * D + d]) : 0.f;
    vself[r][d] = in ? to_f(v[(long long)row * ldkv + g * D + d]) : 0.f;
  }
  float dka[D], dva[D];
  for (int d = 0; d < D; ++d) dka[d] = dva[d] = 0.f;
  // Query row i sees key u when u <= pos0 + i: the first row that sees this block's first key.
  const int first_key = blockIdx.x * BK;
  const int qstart = max(0, first_key - pos0);
  const int qstart_tile = (qstart / BQ) * BQ;
  __syncthreads();
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int qb = qstart_tile; qb < Tq; qb += BQ) {
      for (int idx = tid; idx < BQ * D; idx += BK) {
        int r = idx / D, d = idx % D;
        bool in = qb + r < Tq;
        qs[r][d] = in ? to_f(q[(long long)(qb + r) * ldq + h * D + d]) : 0.f;
        dos[r][d] = in ? to_f(dout[(long long)(qb + r) * ldo + h * D + d]) : 0.f;
      }
      for (int r = tid; r < BQ; r += BK) {
        bool in = qb + r < Tq;
        ls[r] = in ? lse[(long long)h * Tq + qb + r] : 0.f;
        dls[r] = in ? delta[(long long)h * Tq + qb + r] : 0.f;
      }
      __syncthreads();
      if (active) {
        for (int r = 0; r < BQ; ++r) {
          const int i = qb + r;
          if (i >= Tq || u > pos0 + i) continue;
          float s = 0.f, dp = 0.f;
          for (int d = 0; d < D; ++d) {
            s += qs[r][d] * kself[tid][d];
            dp += dos[r][d] * vself[tid][d];
          }
          const float p = expf(s * scale - ls[r]);
          const float ds = p * (dp - dls[r]);
          for (int d = 0; d < D; ++d) {
            dva[d] += p * dos[r][d];
            dka[d] += ds * qs[r][d];
          }
        }
      }
      __syncthreads();
    }
  }
  if (active)
    for (int d = 0; d < D; ++d) {
      dk[(long long)u * lddkv + g * D + d] = from_f<T>(dka[d] * scale);
      dv[(long long)u * lddkv + g * D + d] = from_f<T>(dva[d]);
    }
}

// ---- causal grouped-query attention on tensor cores (bf16, sm_80+): FlashAttention-2's schedule ----
// Each warp owns 16 rows of a 64-row tile and multiplies with mma.sync m16n8k16 (bf16 in, fp32
// accumulate). Fragment layouts (PTX ISA, "mma.m16n8k16"): lane = 4 g + t; an A fragment holds rows g
// and g + 8, columns 2t, 2t+1 and 2t+8, 2t+9; a B fragment holds columns (k) 2t, 2t+1 and 2t+8, 2t+9
// of row (n) g; the fp32 result holds rows g, g + 8 and columns 2t, 2t+1. The result of one product
// (two adjacent 8-column tiles) is therefore the A fragment of the next one, with no shuffles.
// Tiles sit in shared memory as loaded: row-major bf16, rows padded by 8 elements (16 bytes) so that
// ldmatrix reads them without bank conflicts; ldmatrix.trans serves a tile that a product needs along
// its rows. Streamed tiles are double-buffered with cp.async: the next tile loads during this one's
// products. Global rows must start 16-byte aligned (the host checks). Shared memory is dynamic.
#define kLog2e 1.4426950408889634f
extern __shared__ __align__(16) unsigned char dyn_smem[];

__device__ __forceinline__ void mma_16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// Four 8x8 matrices; lanes 8i..8i+7 give the row addresses of matrix i; register i holds matrix i.
__device__ __forceinline__ void ldsm_x4(unsigned* r, const bf16* p) {
#if __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned* r, const bf16* p) {
#if __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}
__device__ __forceinline__ void cp_async16(bf16* dst, const bf16* src, bool valid) {
#if __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}

// Rows [r0, r0 + R) of head columns [col, col + D) into a padded tile, asynchronously; rows at or past
// `limit` are zero-filled (nothing is read for them).
template <int R, int D>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* src, int ld, int col, int r0, int limit) {
  for (int idx = threadIdx.x; idx < R * D / 8; idx += blockDim.x) {
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    const bool ok = r0 + r < limit;
    cp_async16(tile + r * (D + 8) + c, src + (long long)(ok ? r0 + r : 0) * ld + col + c, ok);
  }
}
// A fragment of the 16 x 16 block at (r0, c0) of a row-major tile with row stride ld.
__device__ __forceinline__ void load_a(unsigned* a, const bf16* tile, int ld, int r0, int c0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  ldsm_x4(a, tile + (r0 + (i & 1) * 8 + r) * ld + c0 + (i >> 1) * 8);
}
// acc[16 x 8 N8] += A (16 x K: fragments a[K/16]) * B, B[k][n] = tile[n][k] ("n-major", e.g. S = Q K^T
// with the key tile).
template <int K, int N8>
__device__ __forceinline__ void mma_nmajor(float (*acc)[4], const unsigned (*a)[4], const bf16* tile, int ld, int lane) {
  const int i = lane >> 3, r = lane & 7;
  const bf16* base = tile + ((i >> 1) * 8 + r) * ld + (i & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
#pragma unroll
    for (int n = 0; n < N8; n += 2) {
      unsigned b[4];
      ldsm_x4(b, base + n * 8 * ld + kk * 16);
      mma_16816(acc[n], a[kk], b[0], b[1]);
      mma_16816(acc[n + 1], a[kk], b[2], b[3]);
    }
}
// The same with B[k][n] = tile[k][n] ("k-major", e.g. O = P V with the value tile).
template <int K, int N8>
__device__ __forceinline__ void mma_kmajor(float (*acc)[4], const unsigned (*a)[4], const bf16* tile, int ld, int lane) {
  const int i = lane >> 3, r = lane & 7;
  const bf16* base = tile + ((i & 1) * 8 + r) * ld + (i >> 1) * 8;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
#pragma unroll
    for (int n = 0; n < N8; n += 2) {
      unsigned b[4];
      ldsm_x4_trans(b, base + kk * 16 * ld + n * 8);
      mma_16816(acc[n], a[kk], b[0], b[1]);
      mma_16816(acc[n + 1], a[kk], b[2], b[3]);
    }
}
// Packs a 16 x (16 K2) fp32 result into the A fragments of the next product.
template <int K2>
__device__ __forceinline__ void to_a(unsigned (*a)[4], const float (*c)[4]) {
#pragma unroll
  for (int j = 0; j < K2; ++j) {
    a[j][0] = pack_bf16(c[2 * j][0], c[2 * j][1]);
    a[j][1] = pack_bf16(c[2 * j][2], c[2 * j][3]);
    a[j][2] = pack_bf16(c[2 * j + 1][0], c[2 * j + 1][1]);
    a[j][3] = pack_bf16(c[2 * j + 1][2], c[2 * j + 1][3]);
  }
}
template <int N8> __device__ __forceinline__ void zero(float (*acc)[4]) {
#pragma unroll
  for (int n = 0; n < N8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
}

// Forward: 4 warps x 16 query rows, key tiles of BK. Late query tiles (the most keys) are scheduled first.
// Shared memory: the query tile, then two stages of (key tile, value tile).
template <int D, int BK>
__global__ void __launch_bounds__(128) attention_forward_tc(bf16* out, int ldo, float* lse, const bf16* q, int ldq,
                                                            const bf16* k, const bf16* v, int ldkv, int Tq, int Tk,
                                                            int pos0, int H, int KV, float scale) {
  constexpr int BQ = 64, LD = D + 8, STAGE = 2 * BK * LD;
  bf16* smem = reinterpret_cast<bf16*>(dyn_smem);
  const int h = blockIdx.y, grp = h / (H / KV);
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;

  load_tile_async<BQ, D>(smem, q, ldq, h * D, q0, Tq);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  unsigned qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) load_a(qf[kk], smem, LD, r0, kk * 16, lane);
  __syncthreads();  // the query tile's space becomes stage 0

  float o[D / 8][4];
  zero<D / 8>(o);
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
  const int row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
  const float sl2 = scale * kLog2e;
  const int kend = min(Tk, pos0 + min(Tq, q0 + BQ));
  const int ntiles = (kend + BK - 1) / BK;
  auto load_kv = [&](int it) {
    bf16* st = smem + (it & 1) * STAGE;
    load_tile_async<BK, D>(st, k, ldkv, grp * D, it * BK, Tk);
    load_tile_async<BK, D>(st + BK * LD, v, ldkv, grp * D, it * BK, Tk);
    cp_async_commit();
  };
  if (ntiles > 0) load_kv(0);
  for (int it = 0; it < ntiles; ++it) {
    const int kb = it * BK;
    if (it + 1 < ntiles) {
      load_kv(it + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* ks = smem + (it & 1) * STAGE;
    const bf16* vs = ks + BK * LD;
    float s[BK / 8][4];
    zero<BK / 8>(s);
    mma_nmajor<D, BK / 8>(s, qf, ks, LD, lane);
    // Key j is visible to query row i when j < Tk and j <= pos0 + i (rows past Tq see every key, so they
    // stay finite; they are never written). Only tiles on the diagonal or at the end need the test.
    const bool full = kb + BK <= Tk && kb + BK - 1 <= pos0 + q0 + r0;
    float tmax[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * sl2;
        if (!full) {
          const int j = kb + n * 8 + 2 * t + (e & 1), i = row[e >> 1];
          if (j >= Tk || (i < Tq && j > pos0 + i)) x = kNegInf;
        }
        s[n][e] = x;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], x);
      }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
      const float m_new = fmaxf(m[r], tmax[r]);
      corr[r] = m_new == kNegInf ? 1.f : exp2f(m[r] - m_new);
      m[r] = m_new;
    }
    const float mb[2] = {m[0] == kNegInf ? 0.f : m[0], m[1] == kNegInf ? 0.f : m[1]};
    float rsum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[n][e] - mb[e >> 1]);
        s[n][e] = p;
        rsum[e >> 1] += p;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * corr[r] + rsum[r];  // per thread; summed over the row at the end
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= corr[0], o[n][1] *= corr[0];
      o[n][2] *= corr[1], o[n][3] *= corr[1];
    }
    unsigned pf[BK / 16][4];
    to_a<BK / 16>(pf, s);
    mma_kmajor<BK, D / 8>(o, pf, vs, LD, lane);
    __syncthreads();  // this stage is refilled by the next iteration's load
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row[r];
    if (i >= Tq) continue;
    const float inv = 1.f / l[r];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<unsigned*>(out + (long long)i * ldo + h * D + n * 8 + 2 * t) =
          pack_bf16(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (t == 0) lse[(long long)h * Tq + i] = (m[r] + log2f(l[r])) / kLog2e;
  }
}

// dq = scale * sum_u p_iu (dp_iu - delta_i) k_u, with p = exp(scale q.k - lse) and dp = dout.v:
// 4 warps x 16 query rows; q and dout sit in registers, key and value tiles of BK stream by.
template <int D, int BK>
__global__ void __launch_bounds__(128) attention_backward_dq_tc(bf16* dq, int lddq, const bf16* dout, int ldo,
                                                                const float* lse, const float* delta, const bf16* q,
                                                                int ldq, const bf16* k, const bf16* v, int ldkv, int Tq,
                                                                int Tk, int pos0, int H, int KV, float scale) {
  constexpr int BQ = 64, LD = D + 8, STAGE = 2 * BK * LD;
  bf16* smem = reinterpret_cast<bf16*>(dyn_smem);
  const int h = blockIdx.y, grp = h / (H / KV);
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;
  load_tile_async<BQ, D>(smem, q, ldq, h * D, q0, Tq);
  load_tile_async<BQ, D>(smem + BQ * LD, dout, ldo, h * D, q0, Tq);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  unsigned qf[D / 16][4], dof[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    load_a(qf[kk], smem, LD, r0, kk * 16, lane);
    load_a(dof[kk], smem + BQ * LD, LD, r0, kk * 16, lane);
  }
  __syncthreads();
  const int row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse2[r] = row[r] < Tq ? lse[(long long)h * Tq + row[r]] * kLog2e : 0.f;
    dl[r] = row[r] < Tq ? delta[(long long)h * Tq + row[r]] : 0.f;
  }
  float acc[D / 8][4];
  zero<D / 8>(acc);
  const float sl2 = scale * kLog2e;
  const int kend = min(Tk, pos0 + min(Tq, q0 + BQ));
  const int ntiles = (kend + BK - 1) / BK;
  auto load_kv = [&](int it) {
    bf16* st = smem + (it & 1) * STAGE;
    load_tile_async<BK, D>(st, k, ldkv, grp * D, it * BK, Tk);
    load_tile_async<BK, D>(st + BK * LD, v, ldkv, grp * D, it * BK, Tk);
    cp_async_commit();
  };
  if (ntiles > 0) load_kv(0);
  for (int it = 0; it < ntiles; ++it) {
    const int kb = it * BK;
    if (it + 1 < ntiles) {
      load_kv(it + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* ks = smem + (it & 1) * STAGE;
    const bf16* vs = ks + BK * LD;
    float s[BK / 8][4], dp[BK / 8][4];
    zero<BK / 8>(s);
    zero<BK / 8>(dp);
    mma_nmajor<D, BK / 8>(s, qf, ks, LD, lane);
    mma_nmajor<D, BK / 8>(dp, dof, vs, LD, lane);
    const bool full = kb + BK <= Tk && kb + BK - 1 <= pos0 + q0 + r0 && q0 + r0 + 16 <= Tq;
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2f(s[n][e] * sl2 - lse2[e >> 1]);
        if (!full) {
          const int j = kb + n * 8 + 2 * t + (e & 1), i = row[e >> 1];
          if (i >= Tq || j >= Tk || j > pos0 + i) p = 0.f;
        }
        s[n][e] = p * (dp[n][e] - dl[e >> 1]);
      }
    unsigned dsf[BK / 16][4];
    to_a<BK / 16>(dsf, s);
    mma_kmajor<BK, D / 8>(acc, dsf, ks, LD, lane);
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row[r];
    if (i >= Tq) continue;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<unsigned*>(dq + (long long)i * lddq + h * D + n * 8 + 2 * t) =
          pack_bf16(acc[n][2 * r] * scale, acc[n][2 * r + 1] * scale);
  }
}

// dk, dv of one query head h for a tile of 64 keys (4 warps x 16 keys), query tiles of BQ streaming by;
// computed transposed (s^T = k q^T) so the key rows are the warps' rows. Each head writes its own fp32
// partials [H, Tk, D]; attention_backward_kv_sum adds the heads of a group (no atomics, deterministic).
template <int D, int BQ>
__global__ void __launch_bounds__(128) attention_backward_dkv_tc(float* dk_part, float* dv_part, const bf16* dout,
                                                                 int ldo, const float* lse, const float* delta,
                                                                 const bf16* q, int ldq, const bf16* k, const bf16* v,
                                                                 int ldkv, int Tq, int Tk, int pos0, int H, int KV,
                                                                 float scale) {
  constexpr int BK = 64, LD = D + 8, STAGE = 2 * BQ * LD;
  bf16* smem = reinterpret_cast<bf16*>(dyn_smem);
  __shared__ float ls[2][BQ], dls[2][BQ];
  const int h = blockIdx.y, grp = h / (H / KV);
  const int k0 = blockIdx.x * BK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;
  load_tile_async<BK, D>(smem, k, ldkv, grp * D, k0, Tk);
  load_tile_async<BK, D>(smem + BK * LD, v, ldkv, grp * D, k0, Tk);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  unsigned kf[D / 16][4], vf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    load_a(kf[kk], smem, LD, r0, kk * 16, lane);
    load_a(vf[kk], smem + BK * LD, LD, r0, kk * 16, lane);
  }
  __syncthreads();
  const int key[2] = {k0 + r0 + g, k0 + r0 + g + 8};
  float dka[D / 8][4], dva[D / 8][4];
  zero<D / 8>(dka);
  zero<D / 8>(dva);
  const float sl2 = scale * kLog2e;
  // Query row i sees key u when u <= pos0 + i: the first query tile that sees this key tile.
  const int qstart = (max(0, k0 - pos0) / BQ) * BQ;
  const int ntiles = Tq > qstart ? (Tq - qstart + BQ - 1) / BQ : 0;
  auto load_q = [&](int it) {
    const int qb = qstart + it * BQ;
    bf16* st = smem + (it & 1) * STAGE;
    load_tile_async<BQ, D>(st, q, ldq, h * D, qb, Tq);
    load_tile_async<BQ, D>(st + BQ * LD, dout, ldo, h * D, qb, Tq);
    cp_async_commit();
    for (int r = threadIdx.x; r < BQ; r += blockDim.x) {
      const bool in = qb + r < Tq;
      ls[it & 1][r] = in ? lse[(long long)h * Tq + qb + r] * kLog2e : 0.f;
      dls[it & 1][r] = in ? delta[(long long)h * Tq + qb + r] : 0.f;
    }
  };
  if (ntiles > 0) load_q(0);
  for (int it = 0; it < ntiles; ++it) {
    const int qb = qstart + it * BQ;
    if (it + 1 < ntiles) {
      load_q(it + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* qs = smem + (it & 1) * STAGE;
    const bf16* dos = qs + BQ * LD;
    const float* lsr = ls[it & 1];
    const float* dlr = dls[it & 1];
    float st[BQ / 8][4], dpt[BQ / 8][4];
    zero<BQ / 8>(st);
    zero<BQ / 8>(dpt);
    mma_nmajor<D, BQ / 8>(st, kf, qs, LD, lane);
    mma_nmajor<D, BQ / 8>(dpt, vf, dos, LD, lane);
    const bool full = qb + BQ <= Tq && k0 + r0 + 15 <= pos0 + qb && k0 + r0 + 16 <= Tk;
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = n * 8 + 2 * t + (e & 1);
        float p = exp2f(st[n][e] * sl2 - lsr[c]);
        if (!full) {
          const int i = qb + c, u = key[e >> 1];
          if (i >= Tq || u >= Tk || u > pos0 + i) p = 0.f;
        }
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - dlr[c]);
      }
    unsigned pf[BQ / 16][4], dsf[BQ / 16][4];
    to_a<BQ / 16>(pf, st);
    to_a<BQ / 16>(dsf, dpt);
    mma_kmajor<BQ, D / 8>(dva, pf, dos, LD, lane);
    mma_kmajor<BQ, D / 8>(dka, dsf, qs, LD, lane);
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int u = key[r];
    if (u >= Tk) continue;
    float* dkr = dk_part + ((long long)h * Tk + u) * D;
    float* dvr = dv_part + ((long long)h * Tk + u) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int d = n * 8 + 2 * t;
      *reinterpret_cast<float2*>(dkr + d) = make_float2(dka[n][2 * r] * scale, dka[n][2 * r + 1] * scale);
      *reinterpret_cast<float2*>(dvr + d) = make_float2(dva[n][2 * r], dva[n][2 * r + 1]);
    }
  }
}

// dk[u, g*D + d] = sum of the group's heads' partials (and dv likewise); one block per key row.
__global__ void attention_backward_kv_sum(bf16* dk, bf16* dv, int lddkv, const float* dk_part, const float* dv_part,
                                          int Tk, int H, int KV, int D) {
  const int u = blockIdx.x, group = H / KV;
  for (int idx = threadIdx.x; idx < KV * D; idx += blockDim.x) {
    const int grp = idx / D, d = idx % D;
    float sk = 0.f, sv = 0.f;
    for (int h = grp * group; h < (grp + 1) * group; ++h) {
      sk += dk_part[((long long)h * Tk + u) * D + d];
      sv += dv_part[((long long)h * Tk + u) * D + d];
    }
    dk[(long long)u * lddkv + idx] = __float2bfloat16_rn(sk);
    dv[(long long)u * lddkv + idx] = __float2bfloat16_rn(sv);
  }
}

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
)CUDA";

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const char* t : {"float", "__nv_bfloat16"}) {
    std::string T = t;
    for (const char* k : {"copy_rows", "embedding_forward", "embedding_backward", "rmsnorm_forward", "rmsnorm_backward",
                          "column_sum_add", "rope", "swiglu_forward", "swiglu_backward", "attention_backward_delta",
                          "token_logprob_forward", "token_logprob_backward", "adamw_step"})
      names.push_back(std::string(k) + "<" + T + ">");
    for (int D : kHeadDims) {
      names.push_back(attention_name("attention_forward", T, D));
      names.push_back(attention_name("attention_backward_dq", T, D));
      names.push_back(attention_name("attention_backward_dkv", T, D));
    }
  }
  for (int D : kTensorCoreHeadDims)
    for (const char* kernel : {"attention_forward_tc", "attention_backward_dq_tc", "attention_backward_dkv_tc"})
      names.push_back(attention_tc_name(kernel, D));
  names.push_back("attention_backward_kv_sum");
  names.push_back("convert<float, __nv_bfloat16>");
  names.push_back("convert<__nv_bfloat16, float>");
  names.push_back("sum_squares");
  names.push_back("scale_inplace");
  return names;
}

// Tiles: a query tile of 64 rows (32 when D = 128, to stay under 48 KiB of static shared memory) and
// key tiles of 32 (forward) or 16 (backward, where each thread holds two D-vectors in registers).
std::string attention_name(const std::string& kernel, const std::string& T, int D) {
  const int rows = D <= 64 ? 64 : 32;
  std::string d = std::to_string(D);
  if (kernel == "attention_forward") return kernel + "<" + T + ", " + d + ", " + std::to_string(rows) + ", 32>";
  if (kernel == "attention_backward_dq") return kernel + "<" + T + ", " + d + ", " + std::to_string(rows) + ", " + (D <= 64 ? "16" : "8") + ">";
  return kernel + "<" + T + ", " + d + ", " + std::to_string(rows) + ", " + (D <= 64 ? "16" : "8") + ">";
}

int attention_rows_per_block(int D) { return D <= 64 ? 64 : 32; }

// Tensor-core tiles: 64 rows per block; the streamed tile is 64 rows, or 32 at D = 128, which keeps
// each kernel under 48 KiB of shared memory (two stages of two streamed tiles).
namespace {
int tc_stream_rows(int D) { return D <= 64 ? 64 : 32; }
}  // namespace

std::string attention_tc_name(const std::string& kernel, int D) {
  return kernel + "<" + std::to_string(D) + ", " + std::to_string(tc_stream_rows(D)) + ">";
}

unsigned attention_tc_dynamic_smem(int D) {
  const int ld = D + 8, rows = 64, stream = tc_stream_rows(D);
  // the block's own two 64-row tiles first, then two stages of two streamed tiles (bf16)
  return unsigned(std::max(2 * rows * ld, 4 * stream * ld) * 2);
}

}  // namespace ca::nn_cuda
