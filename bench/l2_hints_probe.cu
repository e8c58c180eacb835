// What a kernel's L2 cache hints gain, and whether any of it crosses a flush (session 31).
// Standalone, CUDA runtime (no GPU here: build on this machine, run on the device):
//   nvcc -O3 -arch=sm_90 -o l2_hints_probe bench/l2_hints_probe.cu && ./l2_hints_probe
// relu(x)*2 on 4096x2048 fp32 with plain, evict-first (__ldcs/__stcs) and L2-cached (__ldcg/__stcg)
// loads and stores, and a 32 MB matvec with plain and evict_last weight loads, each timed (CUDA
// events, 55 calls after 5, median and min-max) after each L2 state a call may start from: no flush
// (four rotated buffer pairs for relu), reads of 2x and 4x the L2 at normal priority, a memset of
// 2x, a read of 2x at evict_last then a demotion (kernel-prof's flush since session 31) or a
// discard, the persisting-L2 reset, and the input freshly written (relu). H100 at 74234c9 (the
// figures in tools/kernel-prof/NOTES.md): the hints' gains are the same after every flush, and
// with no flush the matvec's plain and evict_last weights both come from the L2 at one speed, so
// what evict_last gains is within the call, not carried across the flush.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void relu2_plain(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = fmaxf(x[i], 0.f) * 2.f; }
__global__ void relu2_cs(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) __stcs(y + i, fmaxf(__ldcs(x + i), 0.f) * 2.f); }
__global__ void relu2_cg(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) __stcg(y + i, fmaxf(__ldcg(x + i), 0.f) * 2.f); }
__global__ void gen(float* x, int n, unsigned seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = (float)((i * 2654435761u + seed) & 0xffff) / 32768.f - 1.f; }

__device__ __forceinline__ float4 ld_last(const float4* p) {
  unsigned long long pol; float4 v;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(pol));
  return v; }
template <bool LAST>
__global__ void matvec(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int N, int K) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (row >= N) return;
  float acc[4] = {0, 0, 0, 0};
  const float4* wr = reinterpret_cast<const float4*>(w + (size_t)row * K);
  for (int k4 = lane; k4 < K / 4; k4 += 32) {
    float4 wv = LAST ? ld_last(wr + k4) : wr[k4];
    for (int m = 0; m < 4; ++m) { float4 xv = reinterpret_cast<const float4*>(x + (size_t)m * K)[k4];
      acc[m] += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w; } }
  for (int m = 0; m < 4; ++m) { float v = acc[m]; for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    if (lane == 0) y[(size_t)m * N + row] = v; } }

// flushes
__global__ void flush_read(const int4* __restrict__ p, unsigned long long n, int* sink) {
  int acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
    int4 v = p[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (acc == 0x7fffffff) *sink = acc; }
__global__ void flush_read_last(const int4* __restrict__ p, unsigned long long n, int* sink) {
  unsigned long long pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  int acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
    int4 v; asm volatile("ld.global.L2::cache_hint.v4.s32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p + i), "l"(pol));
    acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (acc == 0x7fffffff) *sink = acc; }
// one thread per 128-byte line
__global__ void demote(const char* p, unsigned long long lines) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < lines; i += (unsigned long long)gridDim.x * blockDim.x)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(p + i * 128) : "memory"); }
__global__ void discard(const char* p, unsigned long long lines) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < lines; i += (unsigned long long)gridDim.x * blockDim.x)
    asm volatile("discard.global.L2 [%0], 128;" :: "l"(p + i * 128) : "memory"); }

static int sms;
static size_t l2;
static char* fbuf; static size_t fbytes; static int* sink;

enum Flush { NONE, READ, READ4, MEMSET, READ_RESET, LAST_DEMOTE, LAST_DISCARD, GEN_INPUT, READ_DEMOTE_ONLY };
static const char* fname[] = {"none(hot/rot)", "read2x", "read4x", "memset2x", "read2x+reset", "last2x+demote", "last2x+discard", "gen-input", "read2x+demote"};

static void do_flush(Flush f, cudaStream_t s, float* x, int n) {
  unsigned long long w2 = (2 * l2) / 16, w4 = fbytes / 16;
  switch (f) {
    case NONE: break;
    case READ: flush_read<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, w2, sink); break;
    case READ4: flush_read<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, w4, sink); break;
    case MEMSET: cudaMemsetAsync(fbuf, rand() & 0xff, 2 * l2, s); break;
    case READ_RESET: CK(cudaStreamSynchronize(s)); CK(cudaCtxResetPersistingL2Cache()); flush_read<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, w2, sink); break;
    case LAST_DEMOTE: flush_read_last<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, w2, sink); demote<<<sms * 8, 256, 0, s>>>(fbuf, 2 * l2 / 128); break;
    case LAST_DISCARD: flush_read_last<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, w2, sink); discard<<<sms * 8, 256, 0, s>>>(fbuf, 2 * l2 / 128); break;
    case GEN_INPUT: flush_read<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, w2, sink); gen<<<(n + 255) / 256, 256, 0, s>>>(x, n, rand()); break;
    case READ_DEMOTE_ONLY: flush_read<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, w2, sink); demote<<<sms * 8, 256, 0, s>>>(fbuf, 2 * l2 / 128); break;
  }
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static float spread(const std::vector<float>& v) {  // (max - min) / median, percent
  return 100.f * (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / median(v); }

int main() {
  CK(cudaFree(0));
  cudaDeviceProp pr; CK(cudaGetDeviceProperties(&pr, 0));
  sms = pr.multiProcessorCount; l2 = pr.l2CacheSize;
  size_t aside = 123; cudaDeviceGetLimit(&aside, cudaLimitPersistingL2CacheSize);
  printf("%s: L2 %zu MB, persistingL2CacheMaxSize %d, set-aside %zu\n", pr.name, l2 >> 20, pr.persistingL2CacheMaxSize, aside);
  fbytes = 4 * l2; CK(cudaMalloc(&fbuf, fbytes)); CK(cudaMemset(fbuf, 0x5a, fbytes)); CK(cudaMalloc(&sink, 16));
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  const int reps = 60;
  // relu2 4096x2048, 4 rotating x/y pairs
  {
    const int n = 4096 * 2048; float *x[4], *y[4];
    for (int i = 0; i < 4; ++i) { CK(cudaMalloc(&x[i], n * 4)); CK(cudaMalloc(&y[i], n * 4)); gen<<<(n + 255) / 256, 256>>>(x[i], n, i); }
    void (*ks[3])(const float*, float*, int) = {relu2_plain, relu2_cs, relu2_cg};
    Flush fl[] = {NONE, READ, READ4, MEMSET, LAST_DEMOTE, LAST_DISCARD, GEN_INPUT, READ_DEMOTE_ONLY};
    for (Flush f : fl) {
      std::vector<float> t[3];
      for (int r = 0; r < reps; ++r) for (int k = 0; k < 3; ++k) {
        int j = (r * 3 + k) & 3;
        do_flush(f, s, x[j], n);
        CK(cudaEventRecord(a, s)); ks[k]<<<(n + 255) / 256, 256, 0, s>>>(x[j], y[j], n); CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b)); float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (r >= 5) t[k].push_back(ms * 1000);
      }
      float p = median(t[0]);
      printf("relu2  %-16s plain %7.2f  cs %7.2f (%+5.1f%%)  cg %7.2f (%+5.1f%%)  spread %.1f/%.1f/%.1f%%\n", fname[f], p,
             median(t[1]), 100 * (median(t[1]) - p) / p, median(t[2]), 100 * (median(t[2]) - p) / p, spread(t[0]), spread(t[1]), spread(t[2]));
    }
    for (int i = 0; i < 4; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
  }
  // matvec: 8192x1024 weight (32 MB), 4 rows
  {
    const int N = 8192, K = 1024; float *x, *w, *y;
    CK(cudaMalloc(&x, 4 * K * 4)); CK(cudaMalloc(&w, (size_t)N * K * 4)); CK(cudaMalloc(&y, 4 * N * 4));
    gen<<<(4 * K + 255) / 256, 256>>>(x, 4 * K, 1); gen<<<(N * K + 255) / 256, 256>>>(w, N * K, 2);
    Flush fl[] = {NONE, READ, READ4, MEMSET, READ_RESET, LAST_DEMOTE, LAST_DISCARD, READ_DEMOTE_ONLY};
    for (Flush f : fl) {
      std::vector<float> t[2];
      // plain and last in separate blocks too (interleaving lets plain ride on last's lines)
      for (int k = 0; k < 2; ++k) for (int r = 0; r < reps; ++r) {
        do_flush(f, s, x, 0);
        CK(cudaEventRecord(a, s));
        if (k == 0) matvec<false><<<N * 32 / 256, 256, 0, s>>>(x, w, y, N, K); else matvec<true><<<N * 32 / 256, 256, 0, s>>>(x, w, y, N, K);
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b)); float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (r >= 5) t[k].push_back(ms * 1000);
      }
      float p = median(t[0]);
      printf("matvec %-16s plain %7.2f  last %7.2f (%+5.1f%%)  spread %.1f/%.1f%%\n", fname[f], p, median(t[1]),
             100 * (median(t[1]) - p) / p, spread(t[0]), spread(t[1]));
      // after evict_last runs, reset everything for the next config
      CK(cudaDeviceSynchronize()); CK(cudaCtxResetPersistingL2Cache());
      flush_read_last<<<sms * 8, 256, 0, s>>>((const int4*)fbuf, fbytes / 16, sink); demote<<<sms * 8, 256, 0, s>>>(fbuf, fbytes / 128);
      CK(cudaDeviceSynchronize());
    }
  }
  // flush costs
  {
    Flush fl[] = {READ, READ4, MEMSET, LAST_DEMOTE, LAST_DISCARD};
    for (Flush f : fl) {
      std::vector<float> t;
      for (int r = 0; r < 30; ++r) { CK(cudaEventRecord(a, s)); do_flush(f, s, nullptr, 0); CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b)); float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000); }
      printf("flush cost %-16s %8.1f us\n", fname[f], median(t));
    }
  }
  return 0;
}
