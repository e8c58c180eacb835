// NetVLAD (KernelBench level 3, 46 and 47) kernels.
#include <cooperative_groups.h>

// Training-mode BatchNorm1d over the columns of s [R, CL] (per column: batch mean and biased
// variance over the R rows, eps inside the square root, then gamma and beta), then a softmax over
// each row's CL values, keeping the first K columns: a [R, K]. One cooperative launch:
//   pass 1: every block sums its contiguous share of rows per column -> part[0][block][c];
//   grid.sync; every block adds the partials in block order (the same sum everywhere) -> mean;
//   pass 2: the same for the squared deviations -> part[1][block][c]; grid.sync -> variance;
//   pass 3: one warp per row (grid-stride): normalize, max, sum of exp, write the first K.
// Needs CL <= BLOCK (a thread per (row group, column)); part holds 2 * gridDim.x * CL floats.
template <int BLOCK>
__global__ void tf_bn_softmax_coop(const float* s, const float* gamma, const float* beta, float* part, float* a,
                                   long long R, int CL, int K, float eps) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  __shared__ float red[BLOCK];
  __shared__ float mean_s[BLOCK], scale_s[BLOCK], shift_s[BLOCK];
  const int G = BLOCK / CL;  // row groups per block
  const int g = threadIdx.x / CL, c = threadIdx.x % CL;
  const bool active = g < G;
  const long long per = (R + gridDim.x - 1) / gridDim.x;
  const long long r0 = (long long)blockIdx.x * per;
  const long long r1 = r0 + per < R ? r0 + per : R;
  float* part1 = part;
  float* part2 = part + (long long)gridDim.x * CL;

  float acc = 0.0f;
  if (active)
    for (long long r = r0 + g; r < r1; r += G) acc += s[r * CL + c];
  red[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x < CL) {
    float t = 0.0f;
    for (int k = 0; k < G; ++k) t += red[k * CL + threadIdx.x];
    part1[(long long)blockIdx.x * CL + threadIdx.x] = t;
  }
  grid.sync();
  if (threadIdx.x < CL) {
    float t = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) t += part1[(long long)b * CL + threadIdx.x];
    mean_s[threadIdx.x] = t / (float)R;
  }
  __syncthreads();

  acc = 0.0f;
  if (active) {
    const float m = mean_s[c];
    for (long long r = r0 + g; r < r1; r += G) {
      float d = s[r * CL + c] - m;
      acc += d * d;
    }
  }
  red[threadIdx.x] = acc;  // red's last readers finished before the grid.sync above
  __syncthreads();
  if (threadIdx.x < CL) {
    float t = 0.0f;
    for (int k = 0; k < G; ++k) t += red[k * CL + threadIdx.x];
    part2[(long long)blockIdx.x * CL + threadIdx.x] = t;
  }
  grid.sync();
  if (threadIdx.x < CL) {
    float t = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) t += part2[(long long)b * CL + threadIdx.x];
    const float rstd = 1.0f / sqrtf(t / (float)R + eps);
    scale_s[threadIdx.x] = rstd * gamma[threadIdx.x];
    shift_s[threadIdx.x] = beta[threadIdx.x];
  }
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const long long warps = (long long)gridDim.x * (BLOCK / 32);
  for (long long r = (long long)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5); r < R; r += warps) {
    const float* sr = s + r * CL;
    float m = __int_as_float(0xff800000);
    for (int j = lane; j < CL; j += 32) m = fmaxf(m, (sr[j] - mean_s[j]) * scale_s[j] + shift_s[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int j = lane; j < CL; j += 32) sum += expf((sr[j] - mean_s[j]) * scale_s[j] + shift_s[j] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int j = lane; j < K; j += 32) a[r * K + j] = expf((sr[j] - mean_s[j]) * scale_s[j] + shift_s[j] - m) / sum;
  }
}

// The tail, one block per batch element b:
//   a_sum[k] = sum_n a[b, n, k]; r[d, k] = vlad[b, k, d] - a_sum[k] * c2[d, k];
//   r /= max(||r[:, k]||, 1e-12) per k (F.normalize over D); then r /= max(||r||, 1e-12) over all
//   D*K (F.normalize of the [B, D*K] reshape); out[b, d * K + k] = r[d, k] (the transposed layout).
// vlad [B, K, D] (the batched gemm's output), a [B, N, K], c2 [D, K] (clusters2), out [B, D * K].
// K <= 128.
template <int BLOCK>
__global__ void tf_netvlad_tail(const float* vlad, const float* a, const float* c2, float* out, int N, int K, int D) {
  __shared__ float asum[128], n1[128], red[32];
  const long long b = blockIdx.x;
  const float* v = vlad + b * K * D;
  if (threadIdx.x < K) {
    float t = 0.0f;
    for (int n = 0; n < N; ++n) t += a[(b * N + n) * K + threadIdx.x];
    asum[threadIdx.x] = t;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int k = warp; k < K; k += BLOCK / 32) {
    float q = 0.0f;
    for (int d = lane; d < D; d += 32) {
      float r = v[(long long)k * D + d] - asum[k] * c2[(long long)d * K + k];
      q += r * r;
    }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (lane == 0) n1[k] = fmaxf(sqrtf(q), 1e-12f);
  }
  __syncthreads();
  const int DK = D * K;
  float q = 0.0f;
  for (int e = threadIdx.x; e < DK; e += BLOCK) {
    const int d = e / K, k = e % K;
    float r = (v[(long long)k * D + d] - asum[k] * c2[e]) / n1[k];
    q += r * r;
  }
  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
  if (lane == 0) red[warp] = q;
  __syncthreads();
  float tot = 0.0f;
  for (int w = 0; w < BLOCK / 32; ++w) tot += red[w];
  const float n2 = fmaxf(sqrtf(tot), 1e-12f);
  float* o = out + b * DK;
  for (int e = threadIdx.x; e < DK; e += BLOCK) {
    const int d = e / K, k = e % K;
    o[e] = (v[(long long)k * D + d] - asum[k] * c2[e]) / n1[k] / n2;
  }
}
