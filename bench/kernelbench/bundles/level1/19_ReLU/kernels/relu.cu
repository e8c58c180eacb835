// KernelBench level1/19_ReLU: y = relu(x), x [4096, 393216] float32 (1.61e9 elements, 6.4 GB).
// Memory-bound: 8 bytes moved per element, nothing to fuse. 16-byte loads and stores (buffers are
// 256-byte aligned), a grid-stride loop with 64-bit indices, two float4 in flight per thread per
// iteration, the n % 4 tail done by the first threads. NaN stays NaN (torch.relu propagates it).

__device__ __forceinline__ float relu1(float v) { return v < 0.0f ? 0.0f : v; }

__device__ __forceinline__ float4 relu4(float4 v) {
  return make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w));
}

__global__ void __launch_bounds__(256) relu_f4(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
  float4* __restrict__ y4 = reinterpret_cast<float4*>(y);
  const long long n4 = n / 4;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + stride < n4; i += 2 * stride) {
    float4 a = __ldcs(x4 + i);          // streaming: x is read once, keep it out of L2's way
    float4 b = __ldcs(x4 + i + stride);
    __stcs(y4 + i, relu4(a));
    __stcs(y4 + i + stride, relu4(b));
  }
  if (i < n4) __stcs(y4 + i, relu4(__ldcs(x4 + i)));
  // the tail (n not a multiple of 4): at most 3 elements
  const long long t = 4 * n4 + (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) y[t] = relu1(x[t]);
}
