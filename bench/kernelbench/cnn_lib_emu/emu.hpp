// A CPU stand-in for the CUDA features the level-3 _lib/cnn_*.cu kernels use, so that their exact source
// can be run and checked on a machine without a GPU: every CUDA thread of a block is a std::thread,
// blocks run one after another (so `__shared__` can be a function-local static), __syncthreads() is a
// barrier of the block, and __shfl_xor_sync an exchange between the 32 lanes of a warp through two
// barriers of the warp (every lane of a warp must call it, as in CUDA with a full mask).
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <algorithm>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
#define __shared__ static

using std::isnan;
using std::max;
using std::min;
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
using std::fmax;
using std::sqrt;
inline float __int_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace emu {
inline std::unique_ptr<std::barrier<>> block_bar;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
inline double xchg[1024];
inline unsigned tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
}  // namespace emu

inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int o) {
  static_assert(sizeof(T) <= sizeof(double));
  const unsigned t = emu::tid();
  auto& bar = *emu::warp_bars[t / 32];
  std::memcpy(&emu::xchg[t], &v, sizeof(T));
  bar.arrive_and_wait();
  T r;
  std::memcpy(&r, &emu::xchg[(t & ~31u) | ((t & 31u) ^ (unsigned)o)], sizeof(T));
  bar.arrive_and_wait();
  return r;
}

namespace emu {
template <typename K, typename... A>
void launch(dim3 grid, dim3 block, K kernel, A... args) {
  gridDim = grid;
  blockDim = block;
  const unsigned nt = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        block_bar = std::make_unique<std::barrier<>>(nt);
        warp_bars.clear();
        for (unsigned w = 0; w < (nt + 31) / 32; ++w)
          warp_bars.push_back(std::make_unique<std::barrier<>>(std::min(32u, nt - 32 * w)));
        std::vector<std::thread> ts;
        ts.reserve(nt);
        for (unsigned t = 0; t < nt; ++t)
          ts.emplace_back([=] {
            blockIdx = dim3{bx, by, bz};
            threadIdx = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            kernel(args...);
          });
        for (auto& t : ts) t.join();
      }
}
}  // namespace emu
