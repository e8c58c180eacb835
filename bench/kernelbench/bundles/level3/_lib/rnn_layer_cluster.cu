// One recurrent layer (tanh RNN, LSTM or GRU; one or two directions) over T steps, or a chunk of
// them, in ONE launch: a cluster of CS blocks (`cluster: [CS, 1, 1]`, grid [CS, cdiv(B, BPC), ndir])
// per (batch group, direction). The input projections of the steps (x_t W_ih^T + b_ih) come
// precomputed from a gemm (`xg`); what is serial is h_{t-1} W_hh^T and the cell.
//
// Block `rank` of a cluster owns the hidden units j0 = rank * H / CS .. j0 + H / CS - 1: its threads
// keep their G gate rows of W_hh (rows g * H + j, PyTorch's order: LSTM i f g o, GRU r z n) in
// registers for the whole launch, and the block keeps the full previous state h_{t-1} of its BPC
// batch rows in shared memory. Per step:
//   1. every (gate row, K slice) dot product of W_hh with h_{t-1}, for each batch row;
//   2. one thread per owned (unit, batch row) adds the slices, b_hh and the prefetched input
//      projection, applies the cell (the LSTM's c stays in that thread's register), writes y, and
//      stores h_t into the other half of a double buffer in EVERY block of the cluster (distributed
//      shared memory);
//   3. cluster.sync(): the next state is complete everywhere. The double buffer makes this one
//      barrier per step enough: a block writes buffer `nxt` of the others only after all of them
//      passed the previous barrier, i.e. finished reading `nxt` as their `cur` of the step before.
// Clusters never talk to each other (batch rows and directions are independent).
//
// Time chunks. One launch runs the steps s0 .. s0 + TC - 1 of T (s0 = 0, TC = T: the whole
// sequence); direction 0 is at t = s, the reverse direction (d = 1) at t = T - 1 - s, as
// nn.LSTM/nn.GRU walk it. A launch's window of times starts at tw = s0 (d = 0) or T - s0 - TC
// (d = 1). Chunks keep the input projections in scratch small (one chunk's, not the sequence's); the
// state passes from one launch to the next through hn/cn: h0 may be the same buffer as hn and c0 as
// cn (every block reads h0/c0 before the first cluster.sync, and hn/cn are written after the last).
//
// Layouts. xg: direction d at xg + d * xg_dir_stride, [rows][G*H], row(t, b) = b * x_sb + (t - tw)
// * x_st (time-major: x_sb = 1, x_st = B; batch_first over the whole sequence: x_sb = T, x_st = 1).
// h0, c0, hn, cn: [ndir][B][H] (this layer's slice of [L * ndir, B, H]). y: [T][B][y_ld], direction
// d in columns d * H .. d * H + H - 1 (PyTorch's output layout, time-major), row t, or t - tw when
// y_local is 1 (a chunk-sized y, one direction). CELL 0 (tanh RNN) and GRU never read c0 or write
// cn.
//
// Registers and shared memory. Thread tid of a block owns gate row r = tid % R (R = G * H / CS) and
// the K slice ks = tid / R of length KC (a template argument): its KC weights W_hh[g * H + j0 + jj,
// ks * KC ..] stay in REGISTERS, so the serial loop reads no weights at all. Where R is a multiple
// of 32, a warp's threads share ks, so their reads of h_{t-1} from shared memory are broadcasts.
// Each thread keeps BPC (a template argument) accumulators, one per batch row. The block must have
// exactly (H / KC) * R threads (at most 512: 128 registers each). Shared memory (floats):
// 2 * BPC * H state (double buffer) and (H / KC) * BPC * R partial sums. Needs H % CS == 0 and
// H % KC == 0 (else nothing is written and the check reports NaN outputs).
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ __forceinline__ float rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// CELL 0: tanh RNN (G = 1), 1: LSTM (G = 4: i f g o), 2: GRU (G = 3: r z n).
template <int CELL, int KC, int BPC>
__global__ void __launch_bounds__(512) rnn_layer_cluster(
    const float* __restrict__ xg, long long xg_dir_stride, long long x_sb, long long x_st,
    const float* __restrict__ w_hh0, const float* __restrict__ w_hh1,  // [G*H, H] per direction
    const float* __restrict__ b_hh0, const float* __restrict__ b_hh1,  // [G*H] per direction
    const float* h0, const float* c0,                                  // [ndir][B][H]
    float* __restrict__ y, int y_ld, int y_local,                      // [T][B][y_ld]
    float* hn, float* cn,                                              // [ndir][B][H]
    int T, int B, int H, int s0, int TC) {
  static_assert(KC % 4 == 0 && BPC >= 1, "KC must be a multiple of 4");
  constexpr int G = CELL == 1 ? 4 : CELL == 2 ? 3 : 1;
  cg::cluster_group cluster = cg::this_cluster();
  const int CS = (int)cluster.num_blocks();
  const int rank = (int)cluster.block_rank();
  // Uniform over the cluster: every block returns, or none does (no barrier is left waiting).
  if (H % CS != 0 || H % KC != 0) return;
  const int HB = H / CS, R = G * HB, KS = H / KC;
  if ((int)blockDim.x != KS * R) return;
  const int d = blockIdx.z;
  const int b0 = blockIdx.y * BPC;
  const int nb = min(BPC, B - b0);
  if (nb < 1) return;
  extern __shared__ float4 rnn_cluster_smem[];
  float* hb = reinterpret_cast<float*>(rnn_cluster_smem);  // [2][BPC][H]
  float* part = hb + 2 * BPC * H;                           // [KS][BPC][R]
  const float* w_hh = d ? w_hh1 : w_hh0;
  const float* b_hh = d ? b_hh1 : b_hh0;
  const float* xgd = xg + d * xg_dir_stride;
  const int j0 = rank * HB;
  const int tid = threadIdx.x;

  // This thread's weights: row r, columns ks * KC .. ks * KC + KC - 1.
  const int r = tid % R, ks = tid / R;
  float w[KC];
  {
    const int g = r / HB, jr = r % HB;
    const float4* src = reinterpret_cast<const float4*>(w_hh + ((size_t)g * H + j0 + jr) * H + (size_t)ks * KC);
#pragma unroll
    for (int k4 = 0; k4 < KC / 4; ++k4) {
      const float4 v = src[k4];
      w[4 * k4] = v.x;
      w[4 * k4 + 1] = v.y;
      w[4 * k4 + 2] = v.z;
      w[4 * k4 + 3] = v.w;
    }
  }
  // Both state buffers: rows bb >= nb stay 0 for good (nobody stores there), rows bb < nb of buffer
  // 0 get h0, and buffer 1 is written whole by the first step before it is read.
  for (int idx = tid; idx < 2 * BPC * H; idx += blockDim.x) {
    const int bb = (idx / H) % BPC, k = idx % H;
    hb[idx] = (idx < BPC * H && bb < nb) ? h0[((size_t)d * B + b0 + bb) * H + k] : 0.0f;
  }
  // The cell threads: one per owned (unit jj, batch row bb).
  const bool cell = tid < HB * nb;
  const int jj = tid % HB, bb = tid / HB;
  const int j = j0 + jj, b = b0 + bb;
  float bh[G];
  float c = 0.0f, hlast = 0.0f;
  if (cell) {
#pragma unroll
    for (int g = 0; g < G; ++g) bh[g] = b_hh[g * H + j];
    if constexpr (CELL == 1) c = c0[((size_t)d * B + b) * H + j];
    hlast = h0[((size_t)d * B + b) * H + j];
  }
  cluster.sync();  // h0 in place in every block before any remote store

  // This launch's steps s0 .. s0 + TC - 1; its window of times starts at tw (xg rows are relative to it).
  const int tw = d ? T - s0 - TC : s0;
  int cur = 0;
  for (int s = s0; s < s0 + TC; ++s) {
    const int t = d ? T - 1 - s : s;
    float xv[G];
    if (cell) {  // issued now, used after the dot products
      const float* xr = xgd + ((long long)b * x_sb + (long long)(t - tw) * x_st) * (long long)(G * H) + j;
#pragma unroll
      for (int g = 0; g < G; ++g) xv[g] = xr[(size_t)g * H];
    }
    const float* hc = hb + cur * BPC * H;
    float acc[BPC];
#pragma unroll
    for (int q = 0; q < BPC; ++q) acc[q] = 0.0f;
#pragma unroll
    for (int k4 = 0; k4 < KC / 4; ++k4) {
#pragma unroll
      for (int q = 0; q < BPC; ++q) {
        const float4 h = reinterpret_cast<const float4*>(hc + q * H + ks * KC)[k4];
        acc[q] = fmaf(w[4 * k4], h.x, acc[q]);
        acc[q] = fmaf(w[4 * k4 + 1], h.y, acc[q]);
        acc[q] = fmaf(w[4 * k4 + 2], h.z, acc[q]);
        acc[q] = fmaf(w[4 * k4 + 3], h.w, acc[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < BPC; ++q) part[(ks * BPC + q) * R + r] = acc[q];
    __syncthreads();
    if (cell) {
      float gh[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float a = bh[g];
        for (int p = 0; p < KS; ++p) a += part[(p * BPC + bb) * R + g * HB + jj];
        gh[g] = a;
      }
      float hnew;
      if constexpr (CELL == 0) {
        hnew = tanhf(xv[0] + gh[0]);
      } else if constexpr (CELL == 1) {
        const float ig = rnn_sigmoid(xv[0] + gh[0]);
        const float fg = rnn_sigmoid(xv[1] + gh[1]);
        const float gg = tanhf(xv[2] + gh[2]);
        const float og = rnn_sigmoid(xv[3] + gh[3]);
        c = fg * c + ig * gg;
        hnew = og * tanhf(c);
      } else {
        const float rg = rnn_sigmoid(xv[0] + gh[0]);
        const float zg = rnn_sigmoid(xv[1] + gh[1]);
        const float ng = tanhf(xv[2] + rg * gh[2]);
        hnew = (1.0f - zg) * ng + zg * hc[bb * H + j];
      }
      y[((size_t)(y_local ? t - tw : t) * B + b) * y_ld + (size_t)d * H + j] = hnew;
      float* slot = hb + (cur ^ 1) * BPC * H + bb * H + j;
      for (int q = 0; q < CS; ++q) *cluster.map_shared_rank(slot, q) = hnew;
      hlast = hnew;
    }
    cluster.sync();
    cur ^= 1;
  }
  if (cell) {
    hn[((size_t)d * B + b) * H + j] = hlast;
    if constexpr (CELL == 1) cn[((size_t)d * B + b) * H + j] = c;
  }
}

// Small helpers of the RNN plans: zeros (h0 = c0 = 0 where a task draws them at random in forward),
// a copy (the state carried between chunks starts as h0 and ends as h_n), and batch_first x
// [B, T, I] to time-major [T, B, I] (so a time chunk of every batch row is one contiguous gemm operand).
__global__ void rnn_fill_zero(float* p, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    p[i] = 0.0f;
}

__global__ void rnn_copy(const float* __restrict__ src, float* __restrict__ dst, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

__global__ void rnn_batch_to_time_major(const float* __restrict__ x, float* __restrict__ xt, int B, int T, int I) {
  const long long n = (long long)B * T * I;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long k = i % I, bt = i / I;  // i indexes xt [T, B, I]: bt = t * B + b
    const long long b = bt % B, t = bt / B;
    xt[i] = x[(b * T + t) * I + k];
  }
}
