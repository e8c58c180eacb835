// Elementwise passes for float32 tensors (shared by the level-3 CNN bundles: prefix cnn_).
// Grid-stride loops over n elements (64-bit), float4 when every pointer is 16-byte aligned (n % 4
// handled by a scalar tail). In place is fine (y may be x or a). NaN propagates as in torch.relu.
// Launch: block [256], grid [max(1, min(cdiv(n, 1024), 132 * 16))].

__device__ __forceinline__ float cnn_ew_relu1(float v) { return v < 0.0f ? 0.0f : v; }
__device__ __forceinline__ bool cnn_ew_al16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0; }

// y = relu(x)
__global__ void __launch_bounds__(256) cnn_relu(const float* x, float* y, long long n) {
  const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
  long long done = 0;
  if (cnn_ew_al16(x) && cnn_ew_al16(y)) {
    const long long n4 = n / 4;
    for (long long i = start; i < n4; i += stride) {
      float4 v = reinterpret_cast<const float4*>(x)[i];
      v.x = cnn_ew_relu1(v.x);
      v.y = cnn_ew_relu1(v.y);
      v.z = cnn_ew_relu1(v.z);
      v.w = cnn_ew_relu1(v.w);
      reinterpret_cast<float4*>(y)[i] = v;
    }
    done = n4 * 4;
  }
  for (long long i = done + start; i < n; i += stride) y[i] = cnn_ew_relu1(x[i]);
}

// y = a + b, relu'd when relu != 0
__global__ void __launch_bounds__(256) cnn_add(const float* a, const float* b, float* y, long long n, int relu) {
  const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
  long long done = 0;
  if (cnn_ew_al16(a) && cnn_ew_al16(b) && cnn_ew_al16(y)) {
    const long long n4 = n / 4;
    for (long long i = start; i < n4; i += stride) {
      const float4 u = reinterpret_cast<const float4*>(a)[i], v = reinterpret_cast<const float4*>(b)[i];
      float4 o = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
      if (relu) o = make_float4(cnn_ew_relu1(o.x), cnn_ew_relu1(o.y), cnn_ew_relu1(o.z), cnn_ew_relu1(o.w));
      reinterpret_cast<float4*>(y)[i] = o;
    }
    done = n4 * 4;
  }
  for (long long i = done + start; i < n; i += stride) {
    const float o = a[i] + b[i];
    y[i] = relu ? cnn_ew_relu1(o) : o;
  }
}
