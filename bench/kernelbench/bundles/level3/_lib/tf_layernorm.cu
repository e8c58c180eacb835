// LayerNorm over the last dimension of rows [rows, cols] (nn.LayerNorm: biased variance, eps inside
// the square root, then gamma and beta). One block per row; the row is cached in dynamic shared
// memory (cols floats: launch with shared: cols * 4), so global memory is read once and written once.
// Two passes over the cached row (mean, then the squared deviations) as PyTorch does, not
// E[x^2] - mean^2.
#include "tf_reduce.cuh"

// y = LN(x). x and y may be the same buffer.
template <int BLOCK>
__global__ void tf_layernorm(const float* x, float* y, const float* gamma, const float* beta, long long rows,
                             int cols, float eps) {
  extern __shared__ float tf_ln_row[];
  __shared__ float red[32];
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const float* xr = x + row * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float v = xr[c];
    tf_ln_row[c] = v;
    s += v;
  }
  const float mean = tf_block_sum<BLOCK>(s, red) / cols;
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float d = tf_ln_row[c] - mean;
    q += d * d;
  }
  const float rstd = 1.0f / sqrtf(tf_block_sum<BLOCK>(q, red) / cols + eps);
  float* yr = y + row * cols;
  for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = (tf_ln_row[c] - mean) * rstd * gamma[c] + beta[c];
}

// s = a + b (written to sum_out unless it is the same as nothing: pass sum_out = a to update a in
// place), y = LN(s). Rows [rows, cols]; a, b, sum_out and y may alias one another only as
// sum_out == a or y == a or y == b (each element is read before it is written, by the same thread).
template <int BLOCK>
__global__ void tf_add_layernorm(const float* a, const float* b, float* sum_out, float* y, const float* gamma,
                                 const float* beta, long long rows, int cols, float eps) {
  extern __shared__ float tf_ln_row[];
  __shared__ float red[32];
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const float* ar = a + row * cols;
  const float* br = b + row * cols;
  float* sr = sum_out + row * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float v = ar[c] + br[c];
    tf_ln_row[c] = v;
    sr[c] = v;
    s += v;
  }
  const float mean = tf_block_sum<BLOCK>(s, red) / cols;
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float d = tf_ln_row[c] - mean;
    q += d * d;
  }
  const float rstd = 1.0f / sqrtf(tf_block_sum<BLOCK>(q, red) / cols + eps);
  float* yr = y + row * cols;
  for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = (tf_ln_row[c] - mean) * rstd * gamma[c] + beta[c];
}

// y = LN(a + b) without keeping the sum (post-norm transformer layers: x = norm(x + f(x))).
// y may be a or b.
template <int BLOCK>
__global__ void tf_residual_layernorm(const float* a, const float* b, float* y, const float* gamma,
                                      const float* beta, long long rows, int cols, float eps) {
  extern __shared__ float tf_ln_row[];
  __shared__ float red[32];
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const float* ar = a + row * cols;
  const float* br = b + row * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float v = ar[c] + br[c];
    tf_ln_row[c] = v;
    s += v;
  }
  const float mean = tf_block_sum<BLOCK>(s, red) / cols;
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float d = tf_ln_row[c] - mean;
    q += d * d;
  }
  const float rstd = 1.0f / sqrtf(tf_block_sum<BLOCK>(q, red) / cols + eps);
  float* yr = y + row * cols;
  for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = (tf_ln_row[c] - mean) * rstd * gamma[c] + beta[c];
}

// Column LayerNorm with a residual and a bias, for channel-first layouts: z and x are [N, E, L]
// (E channels, L positions, contiguous in L); out[n, e, l] = LN over e of (z[n,e,l] + bias[e] +
// x[n,e,l]). One thread per (n, l): every pass over e reads E values that are contiguous across
// the warp's threads (coalesced). Three passes (mean, squared deviations, write) as PyTorch's
// two-pass statistics; the re-reads hit L1/L2.
__global__ void tf_ln_cols(const float* z, const float* bias, const float* x, float* out, const float* gamma,
                           const float* beta, int N, int E, long long L, float eps) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= (long long)N * L) return;
  const long long n = t / L, l = t % L;
  const float* zp = z + n * E * L + l;
  const float* xp = x + n * E * L + l;
  float s = 0.0f;
  for (int e = 0; e < E; ++e) s += zp[e * L] + bias[e] + xp[e * L];
  const float mean = s / E;
  float q = 0.0f;
  for (int e = 0; e < E; ++e) {
    float d = zp[e * L] + bias[e] + xp[e * L] - mean;
    q += d * d;
  }
  const float rstd = 1.0f / sqrtf(q / E + eps);
  float* op = out + n * E * L + l;
  for (int e = 0; e < E; ++e) op[e * L] = (zp[e * L] + bias[e] + xp[e * L] - mean) * rstd * gamma[e] + beta[e];
}

// y = r + LN(x) over rows [rows, cols] (Swin V2's post-norm residual: x = shortcut + norm(f(x))).
// y may be r (in place).
template <int BLOCK>
__global__ void tf_layernorm_residual(const float* x, const float* r, float* y, const float* gamma, const float* beta,
                                      long long rows, int cols, float eps) {
  extern __shared__ float tf_ln_row[];
  __shared__ float red[32];
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const float* xr = x + row * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float v = xr[c];
    tf_ln_row[c] = v;
    s += v;
  }
  const float mean = tf_block_sum<BLOCK>(s, red) / cols;
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    float d = tf_ln_row[c] - mean;
    q += d * d;
  }
  const float rstd = 1.0f / sqrtf(tf_block_sum<BLOCK>(q, red) / cols + eps);
  const float* rr = r + row * cols;
  float* yr = y + row * cols;
  for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = rr[c] + ((tf_ln_row[c] - mean) * rstd * gamma[c] + beta[c]);
}
