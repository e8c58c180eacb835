// Row softmax, one block per row, online max/sum (one read pass for the statistics, one for the
// output): each thread folds its strided elements into (max, sum), warps merge with shuffles,
// warps merge through shared memory. Memory-bound: 8 bytes per element at best.
#define NEG_BIG (-3.402823466e+38f)  // -FLT_MAX: exp(NEG_BIG - x) is 0 without inf - inf = NaN

__device__ __forceinline__ void merge_max_sum(float& m, float& s, float om, float os) {
  float nm = fmaxf(m, om);
  s = s * __expf(m - nm) + os * __expf(om - nm);
  m = nm;
}

template <int THREADS>
__global__ void softmax_rows_online(const float* x, float* y, int rows, int cols) {
  int row = blockIdx.x;
  if (row >= rows) return;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;

  float m = NEG_BIG, s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += THREADS) merge_max_sum(m, s, xr[c], 1.0f);

  for (int offset = 16; offset > 0; offset /= 2) {
    float om = __shfl_xor_sync(0xffffffffu, m, offset);
    float os = __shfl_xor_sync(0xffffffffu, s, offset);
    merge_max_sum(m, s, om, os);
  }
  __shared__ float warp_m[THREADS / 32], warp_s[THREADS / 32];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < THREADS / 32 ? warp_m[lane] : NEG_BIG;
    s = lane < THREADS / 32 ? warp_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) {
      float om = __shfl_xor_sync(0xffffffffu, m, offset);
      float os = __shfl_xor_sync(0xffffffffu, s, offset);
      merge_max_sum(m, s, om, os);
    }
    if (lane == 0) {
      warp_m[0] = m;
      warp_s[0] = s;
    }
  }
  __syncthreads();
  float row_max = warp_m[0], inv_sum = 1.0f / warp_s[0];
  for (int c = threadIdx.x; c < cols; c += THREADS) yr[c] = __expf(xr[c] - row_max) * inv_sum;
}
