// Two outputs from one pass: sum and product.
__global__ void sum_prod(const float* a, const float* b, float* s, float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    s[i] = a[i] + b[i];
    p[i] = a[i] * b[i];
  }
}
