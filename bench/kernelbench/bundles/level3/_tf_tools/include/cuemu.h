// CPU emulation of the CUDA features the tf_ bundles use: blocks run one after another (all at once
// for a cooperative launch), each thread a ucontext coroutine; __syncthreads, warp shuffles and
// grid.sync are barriers of the scheduler. Shared memory is 0xFF-filled per block.
#pragma once
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <cstdio>
#include <vector>
#include <map>
#include <utility>
#include <type_traits>
#include <ucontext.h>
struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
struct CuThread;
struct CuBlock {
  std::map<int, void*> smem;
  void* dyn = nullptr;
  int live = 0, waiting = 0;
  std::vector<CuThread*> threads;
};
struct CuThread {
  ucontext_t ctx;
  uint3 tid, bid;
  CuBlock* blk;
  int warp;
  int wait = 0;  // 0 running/runnable, 1 block barrier, 2 warp barrier, 3 grid barrier, 4 done
  char* stack;
};
inline CuThread* cu_cur;
inline ucontext_t cu_sched;
inline dim3 cu_grid, cu_blockdim;
inline std::vector<float> cu_warpbuf;
#define threadIdx (cu_cur->tid)
#define blockIdx (cu_cur->bid)
#define blockDim (cu_blockdim)
#define gridDim (cu_grid)
inline void cu_yield(int why) { cu_cur->wait = why; swapcontext(&cu_cur->ctx, &cu_sched); }
inline void __syncthreads() { cu_yield(1); }
float* cu_warp_slot(CuThread*);
inline float __shfl_xor_sync(unsigned, float v, int o) {
  int lane = (cu_cur->tid.x + cu_cur->tid.y * cu_blockdim.x + cu_cur->tid.z * cu_blockdim.x * cu_blockdim.y) & 31;
  float* slot = cu_warp_slot(cu_cur);
  slot[lane] = v;
  cu_yield(2);
  float r = slot[lane ^ o];
  cu_yield(2);
  return r;
}
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float __expf(float x) { return expf(x); }
inline void* cu_block_smem(int id, size_t sz) {
  void*& p = cu_cur->blk->smem[id];
  if (!p) { p = malloc(sz); memset(p, 0xFF, sz); }
  return p;
}
template <class T> T* cu_smem(int id) { return (T*)cu_block_smem(id, sizeof(T)); }
inline void* cu_dyn_smem() { return cu_cur->blk->dyn; }
template <class... A, size_t... I>
void cu_call_i(void (*f)(A...), void** a, std::index_sequence<I...>) {
  f(*(std::remove_cv_t<std::remove_reference_t<A>>*)a[I]...);
}
template <class... A> void cu_call(void (*f)(A...), void** a) { cu_call_i(f, a, std::index_sequence_for<A...>{}); }
