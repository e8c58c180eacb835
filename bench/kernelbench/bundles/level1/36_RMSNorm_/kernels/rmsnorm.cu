// KernelBench level1/36_RMSNorm_: y = x / sqrt(mean(x^2, dim=1, keepdim) + eps), eps = 1e-5,
// x [112, 64, 512, 512] float32 (1.88e9 elements, 7.5 GB).
// The reduction runs over the channel axis, whose stride is H*W = 262144 floats. One thread per
// (batch, spatial) position: a warp reads 32 neighbouring positions of one channel (128 contiguous
// bytes, coalesced), the thread keeps its C = 64 channel values in registers, so x is read once and
// y written once (one pass, 8 bytes per element). The channel count is a template argument; a task
// with another C takes the generic two-pass loop. All offsets are 64-bit.

template <int C>
__global__ void __launch_bounds__(256) rmsnorm_channels(const float* __restrict__ x, float* __restrict__ y,
                                                        long long batch, int channels, long long spatial, float eps) {
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= batch * spatial) return;
  const long long b = idx / spatial, s = idx - b * spatial;
  const long long base = b * (long long)channels * spatial + s;
  const float* __restrict__ xp = x + base;
  float* __restrict__ yp = y + base;
  if (channels == C) {
    float v[C];
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      v[c] = __ldcs(xp + (long long)c * spatial);
      ss = fmaf(v[c], v[c], ss);
    }
    const float inv = 1.0f / sqrtf(ss / (float)C + eps);
#pragma unroll
    for (int c = 0; c < C; ++c) __stcs(yp + (long long)c * spatial, v[c] * inv);
  } else {
    float ss = 0.0f;
    for (int c = 0; c < channels; ++c) {
      float t = xp[(long long)c * spatial];
      ss = fmaf(t, t, ss);
    }
    const float inv = 1.0f / sqrtf(ss / (float)channels + eps);
    for (int c = 0; c < channels; ++c) yp[(long long)c * spatial] = xp[(long long)c * spatial] * inv;
  }
}
