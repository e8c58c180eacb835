// Causal grouped-query attention, flash style, on fp32 FMA (any T).
// The device half of the attention family: its launchers and the name expressions they register are in
// ops/attention.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

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
