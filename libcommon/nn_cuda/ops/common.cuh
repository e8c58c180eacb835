// The helpers every ops/*.cu file uses: T <-> fp32 conversions and warp and block reductions.
// T is float or __nv_bfloat16; every sum is accumulated in fp32.
#pragma once
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
#define kNegInf (-__int_as_float(0x7f800000))

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }
// Rounds to T and back: how an intermediate that HF keeps in T loses precision.
template <class T> __device__ __forceinline__ float round_to(float x) { return to_f(from_f<T>(x)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum (or max) over the block; blockDim.x a multiple of 32. Every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? part[lane] : 0.f;
  r = warp_sum(r);
  __syncthreads();  // `part` is reused by the next call
  return r;
}
__device__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? part[lane] : kNegInf;
  r = warp_max(r);
  __syncthreads();
  return r;
}
