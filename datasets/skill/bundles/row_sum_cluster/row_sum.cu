// torch.sum(x, dim=1) for a few very long rows: a cluster of 8 blocks per row (`cluster: [8]` in
// the plan, sm_90). Each block sums one eighth of the row into its own shared memory; after
// cluster.sync() the cluster's rank-0 block reads the seven others' sums straight from their shared
// memory (distributed shared memory, cluster.map_shared_rank) and writes the row's sum; a second
// cluster.sync() keeps every block's shared memory alive until it has been read.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

template <int BLOCK, int PARTS>
__global__ void row_sum_cluster(const float* __restrict__ x, float* __restrict__ out, int cols) {
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float warp_sums[BLOCK / 32];
  __shared__ float block_sum;
  const int row = blockIdx.x / PARTS;
  const int part = (int)cluster.block_rank();
  const int chunk = (cols + PARTS - 1) / PARTS;
  const int begin = part * chunk, end = min(cols, begin + chunk);
  const float* xr = x + (size_t)row * cols;
  float s = 0.0f;
  for (int c = begin + threadIdx.x; c < end; c += BLOCK) s += xr[c];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.0f;
    for (int w = 0; w < BLOCK / 32; ++w) b += warp_sums[w];
    block_sum = b;
  }
  cluster.sync();
  if (part == 0 && threadIdx.x == 0) {
    float t = 0.0f;
    for (int r = 0; r < PARTS; ++r) t += *cluster.map_shared_rank(&block_sum, r);
    out[row] = t;
  }
  cluster.sync();
}
