// Elementwise, pooling and mean kernels for NCHW fp32 (helper B2's shared kernels, prefix mb_).
// ACT codes: 0 none, 1 ReLU, 2 ReLU6, 3 sigmoid. NaN propagates through ReLU and ReLU6 as in torch.

template <int ACT>
__device__ __forceinline__ float mb_act_f(float v) {
  if (ACT == 1) v = v < 0.f ? 0.f : v;
  if (ACT == 2) v = v < 0.f ? 0.f : (v > 6.f ? 6.f : v);
  if (ACT == 3) v = 1.f / (1.f + expf(-v));
  return v;
}

// x[i] = act(x[i]) for i < n, in place; float4 when x is 16-byte aligned and n % 4 == 0.
// Grid-stride: any grid works.
template <int ACT>
__global__ void __launch_bounds__(256) mb_act_inplace(float* x, long long n) {
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long step = (long long)gridDim.x * blockDim.x;
  if ((n & 3) == 0 && ((unsigned long long)x & 15) == 0) {
    float4* x4 = reinterpret_cast<float4*>(x);
    for (long long i = tid; i < n / 4; i += step) {
      float4 v = x4[i];
      v.x = mb_act_f<ACT>(v.x); v.y = mb_act_f<ACT>(v.y); v.z = mb_act_f<ACT>(v.z); v.w = mb_act_f<ACT>(v.w);
      x4[i] = v;
    }
  } else {
    for (long long i = tid; i < n; i += step) x[i] = mb_act_f<ACT>(x[i]);
  }
}

// MaxPool2d over NC planes of H x W into OH x OW: window k x k, stride s, padding p (padding is
// -inf: only in-bounds elements count). The caller computes OH/OW (floor or ceil_mode).
// ACT is applied after the max (ReLU and ReLU6 are monotone: act(max) = max(act)).
// One thread per output element, 64-bit indices.
template <int ACT>
__global__ void __launch_bounds__(256) mb_maxpool2d(const float* __restrict__ x, float* __restrict__ y, int NC, int H, int W,
                                                    int OH, int OW, int k, int s, int p) {
  const long long total = (long long)NC * OH * OW;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int ow = (int)(i % OW);
    const int oh = (int)((i / OW) % OH);
    const long long plane = i / ((long long)OW * OH);
    const float* xp = x + plane * H * W;
    const int h0 = oh * s - p, w0 = ow * s - p;
    float m = __int_as_float(0xff800000);  // -inf
    for (int dh = 0; dh < k; ++dh) {
      const int h = h0 + dh;
      if (h < 0 || h >= H) continue;
      for (int dw = 0; dw < k; ++dw) {
        const int w = w0 + dw;
        if (w < 0 || w >= W) continue;
        const float v = xp[(long long)h * W + w];
        if (v > m || v != v) m = v;
        if (m != m) break;
      }
      if (m != m) break;
    }
    y[i] = mb_act_f<ACT>(m);
  }
}

// y[plane] = mean over HW of act(x[plane, :]): AdaptiveAvgPool2d((1, 1)), torch.mean(x, [2, 3]) and
// AvgPool2d(k) on a k x k map. One warp per plane, 8 planes per 256-thread block: grid cdiv(NC, 8).
template <int ACT>
__global__ void __launch_bounds__(256) mb_mean_hw(const float* __restrict__ x, float* __restrict__ y, int NC, int HW) {
  const int plane = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (plane >= NC) return;
  const float* xp = x + (long long)plane * HW;
  float acc = 0.f;
  for (int i = lane; i < HW; i += 32) acc += mb_act_f<ACT>(xp[i]);
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if (lane == 0) y[plane] = acc / (float)HW;
}
