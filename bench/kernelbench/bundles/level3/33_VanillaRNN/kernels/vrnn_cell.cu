// 33_VanillaRNN: one cell step, output = h2o(tanh(i2h(cat(x, h0)))). The concatenation is never
// materialized: the plan's two gemms read the column halves of i2h.weight [H, I + H] through
// ldb = I + H. tanh has no cuBLASLt epilogue: one in-place pass.
__global__ void vrnn_tanh_inplace(float* __restrict__ p, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    p[i] = tanhf(p[i]);
}
