// SiLU, x * sigmoid(x). The demo's compile error: `v` is used but the load into it was dropped.
__global__ void silu(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v / (1.0f + __expf(-v));
}
