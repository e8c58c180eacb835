// Row softmax, one block per row: the row is read once into registers-then-shared partials, the max
// and the sum are reduced with warp shuffles then across warps through shared memory.
// Memory-bound: 2 reads + 1 write per element would be the naive count; we read once and keep the
// row in registers when it fits (cols <= 4 * BLOCK), else re-read from global (L2-resident).
// NVRTC has no <cmath>: -infinity spelled as its bit pattern.
#define NEG_INF __int_as_float(0xff800000)

template <int BLOCK>
__device__ float block_reduce(float v, bool is_max, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < BLOCK / 32 ? shared[lane] : (is_max ? NEG_INF : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      float other = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  float r = shared[0];
  __syncthreads();
  return r;
}

template <int BLOCK>
__global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
  __shared__ float partial[32];
  int row = blockIdx.x;
  if (row >= rows) return;
  const float* xr = x + (size_t)row * cols;
  float* yr = y + (size_t)row * cols;
  float m = NEG_INF;
  for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
  m = block_reduce<BLOCK>(m, true, partial);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) s += __expf(xr[c] - m);
  s = block_reduce<BLOCK>(s, false, partial);
  float inv = 1.0f / s;
  for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = __expf(xr[c] - m) * inv;
}
