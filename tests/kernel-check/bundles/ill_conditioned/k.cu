// The honest kernel of test-ill-conditioned, in fp32 as the reference (x * 16 is exact).
__global__ void cancel(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (x[i] * 16.0f + 1e8f) - 1e8f;
}
