// GELU in place over n floats (64-bit count, grid-stride).
// tf_gelu_tanh: the tanh form (minGPT's NewGELU, nn.GELU(approximate='tanh')):
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with tanhf (no approximate tanh).
// tf_gelu_erf: nn.GELU() (exact): 0.5 x (1 + erf(x / sqrt(2))).
// Own kernels rather than the gemm step's gelu epilogue: which formula and which accuracy cuBLASLt
// uses is not documented, and an fp32 task is judged at fp32 accuracy.
__global__ void tf_gelu_tanh(float* x, long long n) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const float v = x[e];
    x[e] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * (v * v * v))));
  }
}
__global__ void tf_gelu_erf(float* x, long long n) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const float v = x[e];
    x[e] = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
  }
}
