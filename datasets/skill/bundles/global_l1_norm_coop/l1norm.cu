// y = x / sum(|x|) in one persistent kernel: every block sums |x| over its grid-stride share into
// partials[blockIdx.x], the whole grid waits at grid.sync() (a cooperative launch: `cooperative:
// true` in the plan; the grid is sized to be co-resident, one block per SM here), then every block
// adds the partials in the same fixed order (so every block divides by the same value) and scales
// its share. Two passes over x and one write, no second launch, no atomics.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

template <int BLOCK>
__global__ void l1_normalize(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ partials, long long n) {
  cg::grid_group grid = cg::this_grid();
  __shared__ float warp_sums[BLOCK / 32];
  __shared__ float total;
  float s = 0.0f;
  for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) s += fabsf(x[i]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.0f;
    for (int w = 0; w < BLOCK / 32; ++w) b += warp_sums[w];
    partials[blockIdx.x] = b;
  }
  grid.sync();  // every block's partial is written and visible
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) t += partials[b];
    total = t;
  }
  __syncthreads();
  const float inv = 1.0f / total;
  for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) y[i] = x[i] * inv;
}
