// 34_VanillaRNNHidden, init: split i2h.weight [H, I + H] into its column blocks W_x [H, I] and
// W_h [H, H] (dense), since a gemm operand cannot be a column slice (no leading dimension).
__global__ void vrnn_split_cols(const float* __restrict__ w, float* __restrict__ wx, float* __restrict__ wh,
                                int rows, int nx, int nh) {
  const long long cols = (long long)nx + nh;
  const long long n = (long long)rows * cols;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / cols, c = i % cols;
    if (c < nx) wx[r * nx + c] = w[i];
    else wh[r * nh + (c - nx)] = w[i];
  }
}
