// Training-mode BatchNorm2d for NCHW float32 (shared by the level-3 CNN bundles: prefix cnn_).
//
// PyTorch in training mode normalizes every channel c with the statistics of the batch it is given:
//   mean_c = mean over (n, h, w) of x[n, c, h, w],  var_c = biased variance (divide by N*H*W),
//   y = (x - mean_c) / sqrt(var_c + eps) * gamma_c + beta_c.
// Three steps:
//   1. cnn_bn_partial     grid [P, C], block 256 (at most 256): block p of channel c folds its share of the channel's
//                         N*H*W values into (count, mean, M2) with Welford (robust to a large mean,
//                         unlike sum / sum of squares) and writes part[(c * P + p) * 3 + {0,1,2}].
//                         cnn_bn_partial_copy does the same and also copies the channel into a
//                         second tensor (DenseNet: a dense conv output into its concatenation).
//   2. cnn_bn_finalize    grid [C], block 32: merges the P partials (Chan et al.) into
//                         mv[2 * c] = mean_c, mv[2 * c + 1] = var_c (biased).
//   3. apply, block 256 at most, grid [gx, C, N] (plane (n, c) = (blockIdx.z, blockIdx.y); gx blocks stride over its H*W):
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

// Chan's merge of (n, mean, M2) triples; counts are floats (exact to 2^24 per channel share).
__device__ __forceinline__ void cnn_welford_merge(float& n, float& m, float& m2, float nb, float mb, float m2b) {
  const float nn = n + nb;
  if (nb == 0.0f) return;
  if (n == 0.0f) { n = nb; m = mb; m2 = m2b; return; }
  const float d = mb - m;
  const float f = nb / nn;
  m = m + d * f;
  m2 = m2 + m2b + d * d * n * f;
  n = nn;
}

__device__ __forceinline__ void cnn_welford_add(float& n, float& m, float& m2, float v) {
  n += 1.0f;
  const float d = v - m;
  m += d / n;
  m2 += d * (v - m);
}

// Block-wide merge (blockDim.x a multiple of 32, at most 256); the result is valid in thread 0.
__device__ __forceinline__ void cnn_block_welford(float& n, float& m, float& m2) {
  __shared__ float sn[32], sm[32], sm2[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float nb = __shfl_xor_sync(0xffffffffu, n, o);
    const float mb = __shfl_xor_sync(0xffffffffu, m, o);
    const float m2b = __shfl_xor_sync(0xffffffffu, m2, o);
    cnn_welford_merge(n, m, m2, nb, mb, m2b);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { sn[warp] = n; sm[warp] = m; sm2[warp] = m2; }
  __syncthreads();
  if (warp == 0) {
    n = lane < nw ? sn[lane] : 0.0f;
    m = lane < nw ? sm[lane] : 0.0f;
    m2 = lane < nw ? sm2[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      const float nb = __shfl_xor_sync(0xffffffffu, n, o);
      const float mb = __shfl_xor_sync(0xffffffffu, m, o);
      const float m2b = __shfl_xor_sync(0xffffffffu, m2, o);
      cnn_welford_merge(n, m, m2, nb, mb, m2b);
    }
  }
}

__device__ __forceinline__ bool cnn_al16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0; }

template <bool COPY>
__device__ __forceinline__ void cnn_bn_partial_body(const float* x, long long x_nstride, float* dst, long long d_nstride,
                                                    float* part, int C, int N, int HW, int P) {
  const int c = blockIdx.y, p = blockIdx.x;
  float n = 0.0f, m = 0.0f, m2 = 0.0f;
  const bool vec = (HW % 4 == 0) && (x_nstride % 4 == 0) && cnn_al16(x) &&
                   (!COPY || ((d_nstride % 4 == 0) && cnn_al16(dst)));
  if (vec) {
    const int HW4 = HW / 4;
    const long long total = (long long)N * HW4;
    const long long chunk = (total + P - 1) / P;
    const long long lo = (long long)p * chunk, hi = min(total, lo + chunk);
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
      const int img = (int)(j / HW4), s = (int)(j - (long long)img * HW4);
      const long long off = (long long)img * x_nstride + (long long)c * HW + 4ll * s;
      const float4 v = *reinterpret_cast<const float4*>(x + off);
      if (COPY) *reinterpret_cast<float4*>(dst + (long long)img * d_nstride + (long long)c * HW + 4ll * s) = v;
      // the 4 values' own mean and M2, merged in with one division instead of four
      const float m4 = ((v.x + v.y) + (v.z + v.w)) * 0.25f;
      const float a = v.x - m4, b = v.y - m4, cc = v.z - m4, d = v.w - m4;
      cnn_welford_merge(n, m, m2, 4.0f, m4, (a * a + b * b) + (cc * cc + d * d));
    }
  } else {
    const long long total = (long long)N * HW;
    const long long chunk = (total + P - 1) / P;
    const long long lo = (long long)p * chunk, hi = min(total, lo + chunk);
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
      const int img = (int)(j / HW), s = (int)(j - (long long)img * HW);
      const float v = x[(long long)img * x_nstride + (long long)c * HW + s];
      if (COPY) dst[(long long)img * d_nstride + (long long)c * HW + s] = v;
      cnn_welford_add(n, m, m2, v);
    }
  }
  cnn_block_welford(n, m, m2);
  if (threadIdx.x == 0) {
    float* q = part + ((long long)c * P + p) * 3;
    q[0] = n;
    q[1] = m;
    q[2] = m2;
  }
}

// part: [C, P, 3] floats.
__global__ void __launch_bounds__(256) cnn_bn_partial(const float* x, long long x_nstride, float* part, int C, int N, int HW,
                                                       int P) {
  cnn_bn_partial_body<false>(x, x_nstride, nullptr, 0, part, C, N, HW, P);
}

// The same, and dst's channel c of image n (at dst + n * d_nstride + c * HW) receives x's.
__global__ void __launch_bounds__(256) cnn_bn_partial_copy(const float* x, long long x_nstride, float* dst,
                                                            long long d_nstride, float* part, int C, int N, int HW, int P) {
  cnn_bn_partial_body<true>(x, x_nstride, dst, d_nstride, part, C, N, HW, P);
}

// grid [C], block [32]: mv[2c] = mean, mv[2c + 1] = biased variance. mv may be a view (a later slice of
// a larger statistics array, for channels appended to a concatenation).
__global__ void __launch_bounds__(32) cnn_bn_finalize(const float* part, float* mv, int C, int P) {
  const int c = blockIdx.x;
  float n = 0.0f, m = 0.0f, m2 = 0.0f;
  for (int p = threadIdx.x; p < P; p += 32) {
    const float* q = part + ((long long)c * P + p) * 3;
    cnn_welford_merge(n, m, m2, q[0], q[1], q[2]);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float nb = __shfl_xor_sync(0xffffffffu, n, o);
    const float mb = __shfl_xor_sync(0xffffffffu, m, o);
    const float m2b = __shfl_xor_sync(0xffffffffu, m2, o);
    cnn_welford_merge(n, m, m2, nb, mb, m2b);
  }
  if (threadIdx.x == 0) {
    mv[2 * c] = m;
    mv[2 * c + 1] = n > 0.0f ? fmaxf(m2 / n, 0.0f) : 0.0f;
  }
}

struct CnnBn {
  float mean, scale, beta;
  __device__ __forceinline__ float operator()(float v) const { return (v - mean) * scale + beta; }
};

__device__ __forceinline__ CnnBn cnn_bn_of(const float* mv, const float* gamma, const float* beta, float eps, int c) {
  CnnBn b;
  b.mean = mv[2 * c];
  b.scale = gamma[c] * rsqrtf(mv[2 * c + 1] + eps);
  b.beta = beta[c];
  return b;
}

// MODE 0: y = bn(x) (relu if relu != 0); MODE 1: y = relu(bn(x) + r); MODE 2: y = relu(bn(x) + bn'(r)).
template <int MODE>
__device__ __forceinline__ void cnn_bn_apply_body(const float* x, long long x_nstride, const float* r, long long r_nstride,
                                                  float* y, long long y_nstride, const float* mv, const float* gamma,
                                                  const float* beta, const float* rmv, const float* rgamma,
                                                  const float* rbeta, float eps, int C, int HW, int relu) {
  const int img = blockIdx.z, c = blockIdx.y;
  const CnnBn bn = cnn_bn_of(mv, gamma, beta, eps, c);
  CnnBn rb;
  if (MODE == 2) rb = cnn_bn_of(rmv, rgamma, rbeta, eps, c);
  else rb.mean = 0.0f, rb.scale = 1.0f, rb.beta = 0.0f;
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
                                                     const float* mv, const float* gamma, const float* beta, float eps,
                                                     int C, int HW, int relu) {
  cnn_bn_apply_body<0>(x, x_nstride, nullptr, 0, y, y_nstride, mv, gamma, beta, nullptr, nullptr, nullptr, eps, C, HW, relu);
}

__global__ void __launch_bounds__(256) cnn_bn_add_relu(const float* x, long long x_nstride, const float* r,
                                                        long long r_nstride, float* y, long long y_nstride,
                                                        const float* mv, const float* gamma, const float* beta,
                                                        float eps, int C, int HW) {
  cnn_bn_apply_body<1>(x, x_nstride, r, r_nstride, y, y_nstride, mv, gamma, beta, nullptr, nullptr, nullptr, eps, C, HW, 1);
}

__global__ void __launch_bounds__(256) cnn_bn_bn_add_relu(const float* x, long long x_nstride, const float* r,
                                                           long long r_nstride, float* y, long long y_nstride,
                                                           const float* mv, const float* gamma, const float* beta,
                                                           const float* rmv, const float* rgamma, const float* rbeta,
                                                           float eps, int C, int HW) {
  cnn_bn_apply_body<2>(x, x_nstride, r, r_nstride, y, y_nstride, mv, gamma, beta, rmv, rgamma, rbeta, eps, C, HW, 1);
}

// y[n, c, oh, ow] = mean of relu(bn(x)) over the 2x2 window at (2 oh, 2 ow); OH = H / 2, OW = W / 2
// (AvgPool2d(2, 2): floor, no padding). grid [gx, C, N], block: threads stride over OH * OW.
// y is dense [N, C, OH, OW]; x's image stride is x_nstride.
__global__ void __launch_bounds__(256) cnn_bn_relu_avgpool2(const float* x, long long x_nstride, float* y,
                                                             const float* mv, const float* gamma, const float* beta,
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
__global__ void __launch_bounds__(256) cnn_bn_relu_gap(const float* x, float* y, const float* mv, const float* gamma,
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
