// tf_ (transformer) shared helpers: block-wide sum and max through warp shuffles and a 32-float
// shared array. Every thread of the block must call them (they hold __syncthreads); every thread
// gets the result. BLOCK is the block size, a multiple of 32, at most 1024.
#pragma once
#define TF_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float tf_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float tf_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int BLOCK>
__device__ __forceinline__ float tf_block_sum(float v, float* red) {
  v = tf_warp_sum(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < BLOCK / 32; ++w) r += red[w];  // same order in every thread
  __syncthreads();
  return r;
}
template <int BLOCK>
__device__ __forceinline__ float tf_block_max(float v, float* red) {
  v = tf_warp_max(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = TF_NEG_INF;
  for (int w = 0; w < BLOCK / 32; ++w) r = fmaxf(r, red[w]);
  __syncthreads();
  return r;
}
