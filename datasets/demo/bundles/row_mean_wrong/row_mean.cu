// Row mean, one warp per row with a shuffle reduction. The bug is deliberate (the demo's "wrong"
// candidate): it writes the row's sum and never divides by the number of columns.
__global__ void row_mean_warp(const float* x, float* y, int rows, int cols) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* xr = x + (long long)row * cols;
  float s = 0.0f;
  for (int c = lane; c < cols; c += 32) s += xr[c];
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  if (lane == 0) y[row] = s;  // should be s / cols
}
