// KernelBench level1/47_Sum_reduction_over_a_dimension: torch.sum(x, dim=1, keepdim=True),
// x [128, 4096, 4095] float32 (2.15e9 elements, 8.6 GB) -> [128, 1, 4095].
// The input is read as [outer, R, inner] with the reduced axis R in the middle. A block owns 32
// neighbouring inner columns of one outer index and RY row groups: thread (tx, ty) sums rows
// ty, ty + RY, ... of column tx (a warp reads 32 contiguous floats of one row per step, four rows
// in flight), then the RY partial sums are added in shared memory in a fixed order. Every element
// is read once; offsets are 64-bit (x has more than 2^31 - 1 bytes).

template <int RY>
__global__ void __launch_bounds__(32 * RY) sum_middle(const float* __restrict__ x, float* __restrict__ y,
                                                      long long reduce, long long inner) {
  __shared__ float partial[RY][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long col = (long long)blockIdx.x * 32 + tx;
  const long long o = blockIdx.y;
  float acc = 0.0f;
  if (col < inner) {
    const float* __restrict__ p = x + o * reduce * inner + col;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    long long r = ty;
    for (; r + 3 * RY < reduce; r += 4 * RY) {
      a0 += __ldcs(p + r * inner);
      a1 += __ldcs(p + (r + RY) * inner);
      a2 += __ldcs(p + (r + 2 * RY) * inner);
      a3 += __ldcs(p + (r + 3 * RY) * inner);
    }
    for (; r < reduce; r += RY) a0 += __ldcs(p + r * inner);
    acc = (a0 + a1) + (a2 + a3);
  }
  partial[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && col < inner) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < RY; ++k) s += partial[k][tx];
    y[o * inner + col] = s;
  }
}
