// torch.mean(x, 1): one block per row, each thread sums a strided slice (serial fp32, a different
// order from torch's), warp shuffles then shared memory across warps. `cols_read` is the number of
// columns averaged: the honest bundle reads them all; the half-reduction shortcut of issue 31 (the
// test's --plan-replace) reads the first half at half the bytes.
__global__ void row_mean(const float* x, float* out, int rows, int cols, int cols_read) {
  __shared__ float partial[32];
  const int row = blockIdx.x;
  if (row >= rows) return;
  const float* xr = x + (size_t)row * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols_read; c += blockDim.x) s += xr[c];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[row] = s / (float)cols_read;
  }
}
