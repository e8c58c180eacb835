// UNet with softmax activations (KernelBench level3/45_UNetSoftmax): training-mode BatchNorm2d,
// softmax over the last dimension (W), 2x2 max pooling.
#include "tf_reduce.cuh"

// Batch statistics of x [N, C, HW] per channel, one block per channel: mean, then the biased
// variance as the mean of squared deviations (two passes). stats[c] = mean, stats[C + c] =
// 1/sqrt(var + eps).
template <int BLOCK>
__global__ void unet_bn_stats(const float* x, float* stats, int N, int C, long long HW, float eps) {
  __shared__ float red[32];
  const int c = blockIdx.x;
  float s = 0.0f;
  for (int n = 0; n < N; ++n) {
    const float* p = x + ((long long)n * C + c) * HW;
    for (long long i = threadIdx.x; i < HW; i += BLOCK) s += p[i];
  }
  const float cnt = (float)((long long)N * HW);
  const float mean = tf_block_sum<BLOCK>(s, red) / cnt;
  float q = 0.0f;
  for (int n = 0; n < N; ++n) {
    const float* p = x + ((long long)n * C + c) * HW;
    for (long long i = threadIdx.x; i < HW; i += BLOCK) {
      float d = p[i] - mean;
      q += d * d;
    }
  }
  const float var = tf_block_sum<BLOCK>(q, red) / cnt;
  if (threadIdx.x == 0) {
    stats[c] = mean;
    stats[C + c] = 1.0f / sqrtf(var + eps);
  }
}

// out = softmax over w of BN(x): x [N, C, H, W] dense; one block per row (n, c, h), the row cached
// in dynamic shared memory (W floats). out[n, c, h, w] is at out + n * out_img + (c * H + h) * W + w,
// so an encoder writes straight into its half of the decoder's concatenation buffer
// (out_img = that buffer's per-image size). out may be x (in place; same strides then).
template <int BLOCK>
__global__ void unet_bn_softmax(const float* x, const float* stats, const float* gamma, const float* beta, float* out,
                                int N, int C, int H, int W, long long out_img) {
  extern __shared__ float row[];
  __shared__ float red[32];
  const long long r = blockIdx.x;  // (n * C + c) * H + h
  const int h = (int)(r % H);
  const int c = (int)((r / H) % C);
  const long long n = r / ((long long)H * C);
  const float mean = stats[c], rstd = stats[C + c], g = gamma[c], b = beta[c];
  const float* xr = x + r * W;
  float m = TF_NEG_INF;
  for (int w = threadIdx.x; w < W; w += BLOCK) {
    float v = (xr[w] - mean) * rstd * g + b;
    row[w] = v;
    m = fmaxf(m, v);
  }
  m = tf_block_max<BLOCK>(m, red);
  float s = 0.0f;
  for (int w = threadIdx.x; w < W; w += BLOCK) {
    float e = expf(row[w] - m);
    row[w] = e;
    s += e;
  }
  const float inv = 1.0f / tf_block_sum<BLOCK>(s, red);
  float* o = out + n * out_img + ((long long)c * H + h) * W;
  for (int w = threadIdx.x; w < W; w += BLOCK) o[w] = row[w] * inv;
}

// MaxPool2d(2, 2) (H, W even): x [N, C, H, W] at x + n * in_img + (c * H + h) * W + w (in_img: the
// per-image size of the buffer x lives in), out [N, C, H/2, W/2] dense. NaN propagates as in torch.
__global__ void unet_maxpool2(const float* x, float* out, int N, int C, int H, int W, long long in_img) {
  const int Ho = H / 2, Wo = W / 2;
  const long long total = (long long)N * C * Ho * Wo;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const int j = (int)(e % Wo);
    const int i = (int)((e / Wo) % Ho);
    const int c = (int)((e / ((long long)Wo * Ho)) % C);
    const long long n = e / ((long long)Wo * Ho * C);
    const float* p = x + n * in_img + ((long long)c * H + 2 * i) * W + 2 * j;
    float m = p[0];
    const float v[3] = {p[1], p[W], p[W + 1]};
    for (int k = 0; k < 3; ++k)
      if (v[k] > m || v[k] != v[k]) m = v[k];
    out[e] = m;
  }
}
