// Pooling for NCHW float32 with PyTorch's semantics (shared by the level-3 CNN bundles: prefix cnn_).
// ceil_mode=False, dilation 1 (what the KernelBench CNNs use). The output size is
//   OH = (H + 2 * pad - k) / stride + 1  (floor), and the same for W.
// Launch: grid [gx, C, N] (output plane (n, c) = (blockIdx.z, blockIdx.y); threads stride over OH * OW), block at most 256.
// The input x is read at x + n * x_nstride + c * H * W and the output written at y + n * y_nstride +
// c * OH * OW, so either may be a channel slice of a concatenation (nstride = C * H * W when dense).

__device__ __forceinline__ float cnn_pool_relu1(float v) { return v < 0.0f ? 0.0f : v; }

// MaxPool2d(k, stride, pad): padding counts as -inf; NaN in a window gives NaN (as torch's kernel:
// `val > max || isnan(val)`). relu != 0 returns relu(maxpool(x)) == maxpool(relu(x)) (relu is monotone
// and keeps NaN), so a ReLU before the pool is fused for free.
__global__ void __launch_bounds__(256) cnn_maxpool2d(const float* x, long long x_nstride, float* y, long long y_nstride,
                                                      int C, int H, int W, int OH, int OW, int k, int stride, int pad,
                                                      int relu) {
  const int img = blockIdx.z, c = blockIdx.y;
  const float* xp = x + (long long)img * x_nstride + (long long)c * H * W;
  float* yp = y + (long long)img * y_nstride + (long long)c * OH * OW;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < OH * OW; i += gridDim.x * blockDim.x) {
    const int oh = i / OW, ow = i - oh * OW;
    const int h0 = oh * stride - pad, w0 = ow * stride - pad;
    const int h1 = min(h0 + k, H), w1 = min(w0 + k, W);
    float m = __int_as_float(0xff800000);  // -inf
    for (int h = max(h0, 0); h < h1; ++h)
      for (int w = max(w0, 0); w < w1; ++w) {
        const float v = xp[h * W + w];
        if (v > m || isnan(v)) m = v;
      }
    yp[i] = relu ? cnn_pool_relu1(m) : m;
  }
}

// AvgPool2d(k, stride, pad, count_include_pad): as torch, the divisor with count_include_pad is the
// window clipped to the padded input, (min(h0 + k, H + pad) - h0) * (...), otherwise the number of
// input elements in the window.
__global__ void __launch_bounds__(256) cnn_avgpool2d(const float* x, long long x_nstride, float* y, long long y_nstride,
                                                      int C, int H, int W, int OH, int OW, int k, int stride, int pad,
                                                      int count_include_pad) {
  const int img = blockIdx.z, c = blockIdx.y;
  const float* xp = x + (long long)img * x_nstride + (long long)c * H * W;
  float* yp = y + (long long)img * y_nstride + (long long)c * OH * OW;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < OH * OW; i += gridDim.x * blockDim.x) {
    const int oh = i / OW, ow = i - oh * OW;
    int h0 = oh * stride - pad, w0 = ow * stride - pad;
    int h1 = min(h0 + k, H + pad), w1 = min(w0 + k, W + pad);
    const int padded = (h1 - h0) * (w1 - w0);
    h0 = max(h0, 0);
    w0 = max(w0, 0);
    h1 = min(h1, H);
    w1 = min(w1, W);
    float s = 0.0f;
    for (int h = h0; h < h1; ++h)
      for (int w = w0; w < w1; ++w) s += xp[h * W + w];
    const int div = count_include_pad ? padded : (h1 - h0) * (w1 - w0);
    yp[i] = s / (float)div;
  }
}

// AdaptiveAvgPool2d((1, 1)): y[p] = mean of plane p of x (dense [P, HW]); one warp per plane,
// block [256] (8 planes), grid [cdiv(P, 8)]. relu != 0 averages relu(x).
__global__ void __launch_bounds__(256) cnn_gap(const float* x, float* y, long long planes, int HW, int relu) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long plane = (long long)blockIdx.x * (blockDim.x >> 5) + warp;
  if (plane >= planes) return;
  const float* xp = x + plane * HW;
  float s = 0.0f;
  for (int i = lane; i < HW; i += 32) s += relu ? cnn_pool_relu1(xp[i]) : xp[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[plane] = s / (float)HW;
}
