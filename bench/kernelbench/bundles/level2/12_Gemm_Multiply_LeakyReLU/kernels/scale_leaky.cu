// KernelBench level2/12_Gemm_Multiply_LeakyReLU, after the GEMM step (out = x @ W^T + b):
// out = leaky_relu(out * multiplier, negative_slope) in place, multiplier 2.0, slope 0.1.
// [1024, 8192] float32, 16-byte loads and stores; n % 4 tail by the first threads.
// leaky_relu(t) = t > 0 ? t : t * slope, as torch computes it.

__device__ __forceinline__ float scale_leaky1(float v, float mul, float slope) {
  float t = v * mul;
  return t > 0.0f ? t : t * slope;
}

__global__ void __launch_bounds__(256) scale_leaky_inplace(float* __restrict__ y, long long n, float mul, float slope) {
  float4* y4 = reinterpret_cast<float4*>(y);
  const long long n4 = n / 4;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 v = y4[i];
    y4[i] = make_float4(scale_leaky1(v.x, mul, slope), scale_leaky1(v.y, mul, slope),
                        scale_leaky1(v.z, mul, slope), scale_leaky1(v.w, mul, slope));
  }
  const long long t = 4 * n4 + (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) y[t] = scale_leaky1(y[t], mul, slope);
}
