// Training-mode BatchNorm2d for NCHW float32 (shared by the level-3 CNN bundles: prefix cnn_).
//
// PyTorch in training mode normalizes every channel c with the statistics of the batch it is given:
//   mean_c = mean over (n, h, w) of x[n, c, h, w],  var_c = biased variance (divide by N*H*W),
//   y = (x - mean_c) / sqrt(var_c + eps) * gamma_c + beta_c.
// Three steps:
//   1. cnn_bn_partial     grid [P, C], block 256 (at most 256): block p of channel c sums its share of
//                         the channel's N*H*W values as d = x - K and d^2 in double (K = the channel's
//                         first value, so the variance does not cancel when the mean is large next to
//                         the spread) and writes part[(c * P + p) * 4 + {0..3}] = count, sums, K
//                         (part: float64 scratch). cnn_bn_partial_copy does the same and also copies
//                         the channel into a second tensor (DenseNet: a dense conv output into its
//                         concatenation).
//   2. cnn_bn_finalize    grid [C], block 32: adds the P partials into mv[2 * c] = mean_c,
//                         mv[2 * c + 1] = var_c (biased), in double (mv: float64 scratch).
//   3. apply, block 256 at most, grid [gx, C, N] (plane (n, c) = (blockIdx.z, blockIdx.y); gx blocks
//      stride over its H*W), the mean as a float pair so that x - mean keeps the double's precision:
//        cnn_bn_apply          y = bn(x), optionally relu
//        cnn_bn_add_relu       y = relu(bn(x) + r)               (ResNet block, identity shortcut)
//        cnn_bn_bn_add_relu    y = relu(bn(x) + bn'(r))          (ResNet block, downsample shortcut)
//        cnn_bn_relu_avgpool2  y = avgpool2x2,s2(relu(bn(x)))    (DenseNet transition, before its 1x1 conv)
//        cnn_bn_relu_gap       y[n, c] = mean_hw relu(bn(x))     (DenseNet head; grid [cdiv(N*C, 8)], block 256)
//
// Tensors are addressed plane by plane: channel c of image n starts at ptr + n * nstride + c * HW, so
// x, y and r may be channel slices of a larger (concatenated) tensor: nstride is the image stride in
// elements (C * HW for a dense tensor). y may equal x (in place). float4 is used when HW, the image
// strides and the base addresses allow it; otherwise the scalar loop. Offsets are 64-bit.
// NaN propagates as in torch (relu keeps NaN, (x - mean) * s + b of NaN is NaN).

__device__ __forceinline__ float cnn_relu1(float v) { return v < 0.0f ? 0.0f : v; }

// Block-wide sum of two doubles (blockDim.x a multiple of 32, at most 256); valid in thread 0.
__device__ __forceinline__ void cnn_block_sum2(double& a, double& b) {
  __shared__ double sa[32], sb[32];
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { sa[warp] = a; sb[warp] = b; }
  __syncthreads();
  if (warp == 0) {
    a = lane < nw ? sa[lane] : 0.0;
    b = lane < nw ? sb[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, o);
      b += __shfl_xor_sync(0xffffffffu, b, o);
    }
  }
}

__device__ __forceinline__ bool cnn_al16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0; }

// Sums of d = x - K and d^2 in double, K = the channel's first value (x[c * HW] of image 0): a float
// times a float is exact in double, and the shift keeps E[d^2] - E[d]^2 from cancelling when the
// mean is large next to the spread.
template <bool COPY>
__device__ __forceinline__ void cnn_bn_partial_body(const float* x, long long x_nstride, float* dst, long long d_nstride,
                                                    double* part, int C, int N, int HW, int P) {
  const int c = blockIdx.y, p = blockIdx.x;
  const double K = x[(long long)c * HW];
  double s1 = 0.0, s2 = 0.0;
  long long cnt = 0;
  const bool vec = (HW % 4 == 0) && (x_nstride % 4 == 0) && cnn_al16(x) &&
                   (!COPY || ((d_nstride % 4 == 0) && cnn_al16(dst)));
  if (vec) {
    const int HW4 = HW / 4;
    const long long total = (long long)N * HW4;
    const long long chunk = (total + P - 1) / P;
    const long long lo = (long long)p * chunk, hi = min(total, lo + chunk);
    cnt = 4 * max(0ll, hi - lo);
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
      const int img = (int)(j / HW4), s = (int)(j - (long long)img * HW4);
      const long long off = (long long)img * x_nstride + (long long)c * HW + 4ll * s;
      const float4 v = *reinterpret_cast<const float4*>(x + off);
      if (COPY) *reinterpret_cast<float4*>(dst + (long long)img * d_nstride + (long long)c * HW + 4ll * s) = v;
      const double a = (double)v.x - K, b = (double)v.y - K, cc = (double)v.z - K, d = (double)v.w - K;
      s1 += (a + b) + (cc + d);
      s2 += (a * a + b * b) + (cc * cc + d * d);
    }
  } else {
    const long long total = (long long)N * HW;
    const long long chunk = (total + P - 1) / P;
    const long long lo = (long long)p * chunk, hi = min(total, lo + chunk);
    cnt = max(0ll, hi - lo);
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
      const int img = (int)(j / HW), s = (int)(j - (long long)img * HW);
      const float v = x[(long long)img * x_nstride + (long long)c * HW + s];
      if (COPY) dst[(long long)img * d_nstride + (long long)c * HW + s] = v;
      const double a = (double)v - K;
      s1 += a;
      s2 += a * a;
    }
  }
  cnn_block_sum2(s1, s2);
  if (threadIdx.x == 0) {
    double* q = part + ((long long)c * P + p) * 4;
    q[0] = (double)cnt;
    q[1] = s1;
    q[2] = s2;
    q[3] = K;
  }
}

// part: [C, P, 4] doubles (count, sum of x - K, sum of (x - K)^2, K).
__global__ void __launch_bounds__(256) cnn_bn_partial(const float* x, long long x_nstride, double* part, int C, int N,
                                                       int HW, int P) {
  cnn_bn_partial_body<false>(x, x_nstride, nullptr, 0, part, C, N, HW, P);
}

// The same, and dst's channel c of image n (at dst + n * d_nstride + c * HW) receives x's.
__global__ void __launch_bounds__(256) cnn_bn_partial_copy(const float* x, long long x_nstride, float* dst,
                                                            long long d_nstride, double* part, int C, int N, int HW,
                                                            int P) {
  cnn_bn_partial_body<true>(x, x_nstride, dst, d_nstride, part, C, N, HW, P);
}

// grid [C], block [32]: mv[2c] = mean, mv[2c + 1] = biased variance, in double. mv may be a view (a
// later slice of a larger statistics array, for channels appended to a concatenation).
__global__ void __launch_bounds__(32) cnn_bn_finalize(const double* part, double* mv, int C, int P) {
  const int c = blockIdx.x;
  double n = 0.0, s1 = 0.0, s2 = 0.0;
  for (int p = threadIdx.x; p < P; p += 32) {
    const double* q = part + ((long long)c * P + p) * 4;
    n += q[0];
    s1 += q[1];
    s2 += q[2];
  }
  for (int o = 16; o > 0; o >>= 1) {
    n += __shfl_xor_sync(0xffffffffu, n, o);
    s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    s2 += __shfl_xor_sync(0xffffffffu, s2, o);
  }
  if (threadIdx.x == 0) {
    const double K = part[(long long)c * P * 4 + 3];
    const double md = n > 0.0 ? s1 / n : 0.0;
    mv[2 * c] = K + md;
    mv[2 * c + 1] = n > 0.0 ? fmax(s2 / n - md * md, 0.0) : 0.0;
  }
}

// The mean as a float pair (hi + lo), so that x - mean keeps the double mean's precision when the
// mean is large next to the spread: (x - hi) is exact-ish in float, then lo is taken off.
struct CnnBn {
  float hi, lo, scale, beta;
  __device__ __forceinline__ float operator()(float v) const { return ((v - hi) - lo) * scale + beta; }
};

__device__ __forceinline__ CnnBn cnn_bn_of(const double* mv, const float* gamma, const float* beta, float eps, int c) {
  CnnBn b;
  const double m = mv[2 * c];
  b.hi = (float)m;
  b.lo = (float)(m - (double)b.hi);
  b.scale = gamma[c] * (float)(1.0 / sqrt(mv[2 * c + 1] + (double)eps));
  b.beta = beta[c];
  return b;
}

// MODE 0: y = bn(x) (relu if relu != 0); MODE 1: y = relu(bn(x) + r); MODE 2: y = relu(bn(x) + bn'(r)).
template <int MODE>
__device__ __forceinline__ void cnn_bn_apply_body(const float* x, long long x_nstride, const float* r, long long r_nstride,
                                                  float* y, long long y_nstride, const double* mv, const float* gamma,
                                                  const float* beta, const double* rmv, const float* rgamma,
                                                  const float* rbeta, float eps, int C, int HW, int relu) {
  const int img = blockIdx.z, c = blockIdx.y;
  const CnnBn bn = cnn_bn_of(mv, gamma, beta, eps, c);
  CnnBn rb;
  if (MODE == 2) rb = cnn_bn_of(rmv, rgamma, rbeta, eps, c);
  else rb.hi = 0.0f, rb.lo = 0.0f, rb.scale = 1.0f, rb.beta = 0.0f;
  const float* xp = x + (long long)img * x_nstride + (long long)c * HW;
  const float* rp = MODE ? r + (long long)img * r_nstride + (long long)c * HW : nullptr;
  float* yp = y + (long long)img * y_nstride + (long long)c * HW;
  const int start = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
  const bool vec = HW % 4 == 0 && cnn_al16(xp) && cnn_al16(yp) && (!MODE || cnn_al16(rp));
  auto f = [&](float v, float rv) -> float {
    float o = bn(v);
    if (MODE == 1) o += rv;
    if (MODE == 2) o += rb(rv);
    if (MODE || relu) o = cnn_relu1(o);
    return o;
  };
  if (vec) {
    for (int i = start; i < HW / 4; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(xp)[i];
      float4 rv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (MODE) rv = reinterpret_cast<const float4*>(rp)[i];
      float4 o;
      o.x = f(v.x, rv.x);
      o.y = f(v.y, rv.y);
      o.z = f(v.z, rv.z);
      o.w = f(v.w, rv.w);
      reinterpret_cast<float4*>(yp)[i] = o;
    }
  } else {
    for (int i = start; i < HW; i += stride) yp[i] = f(xp[i], MODE ? rp[i] : 0.0f);
  }
}

__global__ void __launch_bounds__(256) cnn_bn_apply(const float* x, long long x_nstride, float* y, long long y_nstride,
                                                     const double* mv, const float* gamma, const float* beta, float eps,
                                                     int C, int HW, int relu) {
  cnn_bn_apply_body<0>(x, x_nstride, nullptr, 0, y, y_nstride, mv, gamma, beta, nullptr, nullptr, nullptr, eps, C, HW, relu);
}

__global__ void __launch_bounds__(256) cnn_bn_add_relu(const float* x, long long x_nstride, const float* r,
                                                        long long r_nstride, float* y, long long y_nstride,
                                                        const double* mv, const float* gamma, const float* beta,
                                                        float eps, int C, int HW) {
  cnn_bn_apply_body<1>(x, x_nstride, r, r_nstride, y, y_nstride, mv, gamma, beta, nullptr, nullptr, nullptr, eps, C, HW, 1);
}

__global__ void __launch_bounds__(256) cnn_bn_bn_add_relu(const float* x, long long x_nstride, const float* r,
                                                           long long r_nstride, float* y, long long y_nstride,
                                                           const double* mv, const float* gamma, const float* beta,
                                                           const double* rmv, const float* rgamma, const float* rbeta,
                                                           float eps, int C, int HW) {
  cnn_bn_apply_body<2>(x, x_nstride, r, r_nstride, y, y_nstride, mv, gamma, beta, rmv, rgamma, rbeta, eps, C, HW, 1);
}

// y[n, c, oh, ow] = mean of relu(bn(x)) over the 2x2 window at (2 oh, 2 ow); OH = H / 2, OW = W / 2
// (AvgPool2d(2, 2): floor, no padding). grid [gx, C, N], block: threads stride over OH * OW.
// y is dense [N, C, OH, OW]; x's image stride is x_nstride.
__global__ void __launch_bounds__(256) cnn_bn_relu_avgpool2(const float* x, long long x_nstride, float* y,
                                                             const double* mv, const float* gamma, const float* beta,
                                                             float eps, int C, int H, int W) {
  const int img = blockIdx.z, c = blockIdx.y;
  const CnnBn bn = cnn_bn_of(mv, gamma, beta, eps, c);
  const int OH = H / 2, OW = W / 2;
  const float* xp = x + (long long)img * x_nstride + (long long)c * H * W;
  float* yp = y + ((long long)img * C + c) * OH * OW;
  const bool pairs = W % 2 == 0 && (reinterpret_cast<unsigned long long>(xp) & 7ull) == 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < OH * OW; i += gridDim.x * blockDim.x) {
    const int oh = i / OW, ow = i - oh * OW;
    const float* q = xp + (2 * oh) * W + 2 * ow;
    float a, b, cc, d;
    if (pairs) {  // W even and the plane 8-byte aligned: each row pair is one float2
      const float2 u = *reinterpret_cast<const float2*>(q), v = *reinterpret_cast<const float2*>(q + W);
      a = u.x, b = u.y, cc = v.x, d = v.y;
    } else {
      a = q[0], b = q[1], cc = q[W], d = q[W + 1];
    }
    const float s = (cnn_relu1(bn(a)) + cnn_relu1(bn(b))) + (cnn_relu1(bn(cc)) + cnn_relu1(bn(d)));
    yp[i] = s * 0.25f;
  }
}

// y[p] = mean over HW of relu(bn(x)) for each plane p = n * C + c; one warp per plane, 8 per block
// (block [256], grid [cdiv(N * C, 8)]). x dense [N, C, H, W] (nstride C * HW), y [N, C].
__global__ void __launch_bounds__(256) cnn_bn_relu_gap(const float* x, float* y, const double* mv, const float* gamma,
                                                      const float* beta, float eps, int N, int C, int HW) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long plane = (long long)blockIdx.x * (blockDim.x >> 5) + warp;
  if (plane >= (long long)N * C) return;
  const int c = (int)(plane % C);
  const CnnBn bn = cnn_bn_of(mv, gamma, beta, eps, c);
  const float* xp = x + plane * HW;
  float s = 0.0f;
  for (int i = lane; i < HW; i += 32) s += cnn_relu1(bn(xp[i]));
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[plane] = s / (float)HW;
}
