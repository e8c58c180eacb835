// y[m, n] = relu(sum_k x[m, k] * w[n, k] + b[n]), hand-written: 64x64 output tiles, 16-wide K slabs
// staged in shared memory, each thread computing a 4x4 micro-tile (16 FMAs per pair of shared
// loads) so the kernel is compute- rather than shared-memory-bound. fp32 FMAs throughout (no TF32).
#define TILE 64
#define KSLAB 16

__global__ void linear_relu_tiled(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                  float* __restrict__ y, int M, int N, int K) {
  __shared__ float xs[KSLAB][TILE + 1];  // +1: no bank conflicts on the transposed store
  __shared__ float ws[KSLAB][TILE + 1];
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // 256 threads as 16x16
  int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += KSLAB) {
    // 64 rows x 16 k of x and of w: 1024 values each, 4 per thread.
    for (int i = threadIdx.x; i < TILE * KSLAB; i += 256) {
      int r = i / KSLAB, kk = i % KSLAB;
      xs[kk][r] = (row0 + r < M && k0 + kk < K) ? x[(size_t)(row0 + r) * K + k0 + kk] : 0.0f;
      ws[kk][r] = (col0 + r < N && k0 + kk < K) ? w[(size_t)(col0 + r) * K + k0 + kk] : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < KSLAB; ++kk) {
      float a[4], c[4];
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty * 4 + i];
      for (int j = 0; j < 4; ++j) c[j] = ws[kk][tx * 4 + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], c[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
      if (r < M && c < N) y[(size_t)r * N + c] = fmaxf(acc[i][j] + b[c], 0.0f);
    }
}
