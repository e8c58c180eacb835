// The honest kernel of test-big-bias: out[i] = bias[i % C] + 1e-7 * x[i].
__global__ void bias_add(const float* x, const float* bias, float* out, int n, int c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = bias[i % c] + 1e-7f * x[i];
}
