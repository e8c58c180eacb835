// Causal grouped-query attention on tensor cores (bf16, sm_80+).
// The device half of the attention family: its launchers and the name expressions they register are in
// ops/attention.cpp. Compiled by NVRTC at run time as one translation unit with the other ops/*.cu,
// embedded in the binaries at build time (libcommon/CMakeLists.txt, kernels.cpp.in).
#include "libcommon/nn_cuda/ops/common.cuh"

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
// long: one tile loop whose stages share the fragments in registers; split, they would go through memory
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
// long: one tile loop whose stages share the fragments in registers; split, they would go through memory
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
// long: one tile loop whose stages share the fragments in registers; split, they would go through memory
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
