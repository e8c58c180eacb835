// Training-mode BatchNorm2d for NCHW fp32 activations (helper B2's shared kernels, prefix mb_).
// BatchNorm in training mode normalizes with the batch's own statistics: per channel c, the mean
// and the biased variance over N, H, W; y = (x - mean) / sqrt(var + eps) * gamma + beta.
//
// mb_bn_stats: grid [C, S], one block per (channel, split). The channel's N*HW values are cut into
// S contiguous pieces of the flattened (n, p) index; each block sums its piece and its squares in
// double (so E[x^2] - E[x]^2 loses nothing that matters for fp32 data) and writes the two partial
// sums to part[(c * S + s) * 2 + {0, 1}].
// mb_bn_apply<ACT, RES>: grid [N * C, cdiv(HW, 4 * blockDim)]. Warp 0 of each block folds the
// channel's S partials into mean and invstd, then the block normalizes its share of the (n, c)
// plane: v = (x - mean) * (gamma * invstd) + beta (the mean as a float pair), then ACT (0 none,
// 1 ReLU, 2 ReLU6), then RES (1: v += r at the output's index). groups > 1 also applies
// ShuffleNet's channel shuffle to the output: input channel c = i * (C / groups) + j goes to output
// channel j * groups + i (groups = 1 is the identity). y may be x (in place) when groups = 1.
// mb_bn_apply_add_bn<ACT>: y = ACT(bn(x)) + bn_r(r), two BatchNorms in one pass (a normalized
// shortcut), same grid.

#define MB_FULL 0xffffffffu

__device__ __forceinline__ double mb_warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(MB_FULL, v, o);
  return v;
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) mb_bn_stats(const float* __restrict__ x, double* __restrict__ part, int C, int HW,
                                                     int count, int S) {
  const int c = blockIdx.x, s = blockIdx.y;
  const int chunk = (count + S - 1) / S;
  const int j0 = s * chunk;
  const int j1 = min(count, j0 + chunk);
  double sum = 0.0, sq = 0.0;
  for (int n = j0 / HW; j0 < j1 && n * HW < j1; ++n) {
    const int a = max(j0 - n * HW, 0), b = min(j1 - n * HW, HW);
    const float* row = x + ((long long)n * C + c) * (long long)HW;
    int p = a + threadIdx.x;
    for (; p + 3 * BLOCK < b; p += 4 * BLOCK) {
      const float v0 = row[p], v1 = row[p + BLOCK], v2 = row[p + 2 * BLOCK], v3 = row[p + 3 * BLOCK];
      sum += (double)v0 + (double)v1 + (double)v2 + (double)v3;
      sq += (double)v0 * v0 + (double)v1 * v1 + (double)v2 * v2 + (double)v3 * v3;
    }
    for (; p < b; p += BLOCK) {
      const float v = row[p];
      sum += v;
      sq += (double)v * v;
    }
  }
  __shared__ double s_sum[32], s_sq[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  sum = mb_warp_sum_d(sum);
  sq = mb_warp_sum_d(sq);
  if (lane == 0) { s_sum[warp] = sum; s_sq[warp] = sq; }
  __syncthreads();
  if (warp == 0) {
    sum = lane < BLOCK / 32 ? s_sum[lane] : 0.0;
    sq = lane < BLOCK / 32 ? s_sq[lane] : 0.0;
    sum = mb_warp_sum_d(sum);
    sq = mb_warp_sum_d(sq);
    if (lane == 0) {
      part[2 * ((long long)c * S + s)] = sum;
      part[2 * ((long long)c * S + s) + 1] = sq;
    }
  }
}

template <int ACT>
__device__ __forceinline__ float mb_bn_act(float v) {
  if (ACT == 1) v = v < 0.f ? 0.f : v;                            // NaN stays NaN, as torch.relu
  if (ACT == 2) v = v < 0.f ? 0.f : (v > 6.f ? 6.f : v);           // ReLU6 (hardtanh 0, 6)
  return v;
}

// Warp 0 folds channel c's S partial sums into the mean (as a float pair hi + lo, so that x - mean
// keeps the double mean's precision when the mean is large next to the spread), gamma * invstd and
// beta: out[0..3] = mean_hi, mean_lo, scale, beta.
__device__ __forceinline__ void mb_bn_fold(const double* __restrict__ part, const float* __restrict__ gamma,
                                           const float* __restrict__ beta, int c, int S, int count, float eps, float* out) {
  if (threadIdx.x < 32) {
    double a = 0.0, b = 0.0;
    for (int i = threadIdx.x; i < S; i += 32) {
      a += part[2 * ((long long)c * S + i)];
      b += part[2 * ((long long)c * S + i) + 1];
    }
    a = mb_warp_sum_d(a);
    b = mb_warp_sum_d(b);
    if (threadIdx.x == 0) {
      const double mean = a / count;
      double var = b / count - mean * mean;
      if (var < 0.0) var = 0.0;
      const double inv = 1.0 / sqrt(var + (double)eps);
      const float hi = (float)mean;
      out[0] = hi;
      out[1] = (float)(mean - (double)hi);
      out[2] = (float)(gamma[c] * inv);
      out[3] = beta[c];
    }
  }
}

template <int ACT, int RES>
__global__ void __launch_bounds__(256) mb_bn_apply(const float* x, float* y, const double* __restrict__ part,
                                                   const float* __restrict__ gamma, const float* __restrict__ beta,
                                                   const float* r, int C, int HW, int S, int count, float eps, int groups) {
  __shared__ float s_bn[4];
  const int plane = blockIdx.x;
  const int c = plane % C, n = plane / C;
  mb_bn_fold(part, gamma, beta, c, S, count, eps, s_bn);
  __syncthreads();
  const float mh = s_bn[0], ml = s_bn[1], scale = s_bn[2], sh = s_bn[3];
  const int cpg = C / groups;
  const int oc = (c % cpg) * groups + c / cpg;
  const long long ib = (long long)plane * HW;
  const long long ob = ((long long)n * C + oc) * HW;
  const int start = blockIdx.y * blockDim.x * 4;
  if ((HW & 3) == 0) {
    const int p = start + threadIdx.x * 4;
    if (p < HW) {
      float4 v = *reinterpret_cast<const float4*>(x + ib + p);
      v.x = mb_bn_act<ACT>(((v.x - mh) - ml) * scale + sh);
      v.y = mb_bn_act<ACT>(((v.y - mh) - ml) * scale + sh);
      v.z = mb_bn_act<ACT>(((v.z - mh) - ml) * scale + sh);
      v.w = mb_bn_act<ACT>(((v.w - mh) - ml) * scale + sh);
      if (RES) {
        const float4 q = *reinterpret_cast<const float4*>(r + ob + p);
        v.x += q.x; v.y += q.y; v.z += q.z; v.w += q.w;
      }
      *reinterpret_cast<float4*>(y + ob + p) = v;
    }
  } else {
    for (int k = 0; k < 4; ++k) {
      const int p = start + k * blockDim.x + threadIdx.x;
      if (p < HW) {
        float v = mb_bn_act<ACT>(((x[ib + p] - mh) - ml) * scale + sh);
        if (RES) v += r[ob + p];
        y[ob + p] = v;
      }
    }
  }
}

// y = act(bn(x)) + bn_r(r): a block's output with a BatchNorm'd shortcut added (ShuffleNet's first
// unit of a stage), both normalizations in one pass. x's statistics in part, r's in part_r (each
// [C, S, 2]); same grid as mb_bn_apply. y may be x or r (in place).
template <int ACT>
__global__ void __launch_bounds__(256) mb_bn_apply_add_bn(const float* x, float* y, const double* __restrict__ part,
                                                          const float* __restrict__ gamma, const float* __restrict__ beta,
                                                          const float* r, const double* __restrict__ part_r,
                                                          const float* __restrict__ gamma_r, const float* __restrict__ beta_r,
                                                          int C, int HW, int S, int count, float eps) {
  __shared__ float s_bn[4], s_r[4];
  const int plane = blockIdx.x;
  const int c = plane % C;
  mb_bn_fold(part, gamma, beta, c, S, count, eps, s_bn);
  __syncthreads();
  mb_bn_fold(part_r, gamma_r, beta_r, c, S, count, eps, s_r);
  __syncthreads();
  const float m0 = s_bn[0], l0 = s_bn[1], a0 = s_bn[2], b0 = s_bn[3];
  const float m1 = s_r[0], l1 = s_r[1], a1 = s_r[2], b1 = s_r[3];
  const long long base = (long long)plane * HW;
  const int start = blockIdx.y * blockDim.x * 4;
  if ((HW & 3) == 0) {
    const int p = start + threadIdx.x * 4;
    if (p < HW) {
      float4 v = *reinterpret_cast<const float4*>(x + base + p);
      const float4 q = *reinterpret_cast<const float4*>(r + base + p);
      v.x = mb_bn_act<ACT>(((v.x - m0) - l0) * a0 + b0) + (((q.x - m1) - l1) * a1 + b1);
      v.y = mb_bn_act<ACT>(((v.y - m0) - l0) * a0 + b0) + (((q.y - m1) - l1) * a1 + b1);
      v.z = mb_bn_act<ACT>(((v.z - m0) - l0) * a0 + b0) + (((q.z - m1) - l1) * a1 + b1);
      v.w = mb_bn_act<ACT>(((v.w - m0) - l0) * a0 + b0) + (((q.w - m1) - l1) * a1 + b1);
      *reinterpret_cast<float4*>(y + base + p) = v;
    }
  } else {
    for (int k = 0; k < 4; ++k) {
      const int p = start + k * blockDim.x + threadIdx.x;
      if (p < HW) y[base + p] = mb_bn_act<ACT>(((x[base + p] - m0) - l0) * a0 + b0) + (((r[base + p] - m1) - l1) * a1 + b1);
    }
  }
}
