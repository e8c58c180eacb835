// KernelBench level1/23_Softmax: torch.softmax(x, dim=1), x [4096, 393216] float32 (6.4 GB).
// One block per row (a row is 1.5 MB, far too long for registers or shared memory). Two passes:
//  1. online max-and-sum: each thread keeps (m, s) with s = sum exp(x - m), rescaled when m grows,
//     over 16-byte loads; the (m, s) pairs are merged by warp shuffles, then across warps in shared;
//  2. y = exp(x - m) / s, 16-byte loads and streaming stores.
// So x is read twice and y written once (3 x 6.4 GB), against three reads for max / sum / write.
// Rows whose length is not a multiple of 4 take the scalar path. Row offsets are 64-bit.
#define NEG_INF __int_as_float(0xff800000)

struct MS { float m, s; };

__device__ __forceinline__ MS ms_merge(MS a, MS b) {
  float m = fmaxf(a.m, b.m);
  if (m == NEG_INF) return MS{NEG_INF, 0.0f};          // both empty (or all -inf)
  return MS{m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ void ms_add(MS& a, float v) {
  if (v > a.m) { a.s = a.s * __expf(a.m - v) + 1.0f; a.m = v; }
  else a.s += __expf(v - a.m);
}

template <int BLOCK>
__device__ MS block_merge(MS v, MS* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    MS other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = ms_merge(v, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < BLOCK / 32 ? shared[lane] : MS{NEG_INF, 0.0f};
    for (int o = 16; o > 0; o >>= 1) {
      MS other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
      v = ms_merge(v, other);
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                      int rows, int cols) {
  __shared__ MS partial[32];
  const int row = blockIdx.x;
  if (row >= rows) return;
  const float* __restrict__ xr = x + (long long)row * cols;
  float* __restrict__ yr = y + (long long)row * cols;
  MS acc{NEG_INF, 0.0f};
  const bool vec = (cols % 4) == 0;   // then every row starts 16-byte aligned
  if (vec) {
    const float4* xr4 = reinterpret_cast<const float4*>(xr);
    const int c4 = cols / 4;
    for (int c = threadIdx.x; c < c4; c += BLOCK) {
      float4 v = xr4[c];
      // merge the four values as one group: one rescale per float4
      float m4 = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
      if (m4 != NEG_INF) {
        float s4 = __expf(v.x - m4) + __expf(v.y - m4) + __expf(v.z - m4) + __expf(v.w - m4);
        acc = ms_merge(acc, MS{m4, s4});
      }
    }
  } else {
    for (int c = threadIdx.x; c < cols; c += BLOCK) ms_add(acc, xr[c]);
  }
  acc = block_merge<BLOCK>(acc, partial);
  const float m = acc.m, inv = 1.0f / acc.s;
  if (vec) {
    const float4* xr4 = reinterpret_cast<const float4*>(xr);
    float4* yr4 = reinterpret_cast<float4*>(yr);
    const int c4 = cols / 4;
    for (int c = threadIdx.x; c < c4; c += BLOCK) {
      float4 v = __ldcs(xr4 + c);
      __stcs(yr4 + c, make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv,
                                  __expf(v.z - m) * inv, __expf(v.w - m) * inv));
    }
  } else {
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = __expf(xr[c] - m) * inv;
  }
}
