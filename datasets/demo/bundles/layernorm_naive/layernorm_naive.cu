// LayerNorm over the last dim, one thread per row, three serial passes: correct but slow on
// purpose (4096 threads keep few SMs busy, and neighbouring threads read addresses a row apart,
// so no load is coalesced). The demo's "correct and slow" candidate.
__global__ void layernorm_rows_naive(const float* x, const float* weight, const float* bias, float* y,
                                     int rows, int cols, float eps) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + (long long)r * cols;
  float* yr = y + (long long)r * cols;
  float mean = 0.0f;
  for (int c = 0; c < cols; ++c) mean += xr[c];
  mean /= cols;
  float var = 0.0f;
  for (int c = 0; c < cols; ++c) {
    float d = xr[c] - mean;
    var += d * d;
  }
  var /= cols;
  float inv_std = rsqrtf(var + eps);
  for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * inv_std * weight[c] + bias[c];
}
