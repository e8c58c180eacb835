// out[i] = a[i] * alpha + b[i]: the smallest bundle (DESIGN.md §3). Memory-bound: one load of a and
// b, one store per element; 256 threads per block keep every SM busy at any N.
__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * alpha + b[i];
}
