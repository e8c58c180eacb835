// Exact (erf) GELU, correct values, but it reads the SM clock: left-over timing instrumentation
// that the policy forbids (results must not depend on time). The demo's policy violation.
__global__ void gelu_erf(const float* x, float* y, long long* cycles, int n) {
  long long start = clock64();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
  if (i == 0) cycles[0] = clock64() - start;
}
