// State a kernel might keep between calls where the executor's reset does not reach; eight probes
// (4, 6 and 8 are described where they are written; `state_probe` alone runs 5 6 8 7 1 1b 4 2 3):
// 1. kernel parameters written through their address (cvta.param, as __grid_constant__ gives it):
//    does a graph's next replay, or the next launch, find what the kernel wrote there? And (1b) found
//    by a scan of device memory instead, without an address?
// 2. pageable host memory (HMM): can a kernel write a malloc'd word of its process? The executor
//    keeps the module globals' load-time images in host memory on the premise that it cannot.
// 3. the grid workspace a cooperative launch finds through %envreg1/2 (the driver's: cooperative
//    groups' grid barrier, {wsSize, barrier} in cooperative_groups/details/driver_abi.h). The rules
//    leave %envreg legal, since grid.sync reads it, so a candidate's cooperative kernel reaches memory
//    no buffer of the plan holds: the same memory every launch (and on another stream)? how large?
//    does a word written there outlive the launch, and does the barrier word itself count launches
//    (a counter a kernel could read)? Four launches write the word past the barrier, two read;
//    then a plain launch shows what %envreg1/2 hold outside a cooperative one.
// 5. (described where it is written, and run first) which module variables cuModuleGetGlobal finds.
// 8. uniform registers (UR0-63 per warp): does a kernel read what the last warp left?
// 7. every %envreg across launches, cooperative launches and graph replays: a counter among them?
// 6. predicate registers (7 per thread): the register scrub fills the general registers only; does a
//    kernel that reads predicates it never wrote find what the last kernel on that slot left?
//   nvcc -arch=sm_90 -o state_probe bench/state_probe.cu -L$CUDA/lib64/stubs -lcuda -lnvrtc && ./state_probe [N]
// (scripts/device-session.sh state-probe). Session 35 wrote 1-5; session 36 ran them on an H100 (1, 1b:
// nothing carried; 2: no HMM; 4: the reserve kept tags, now scrubbed; 5: every name found) and added 6.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void probe(unsigned long long* out, int write, int sync) {
  unsigned lo, hi;  // cooperative_groups' driver_abi.h: %envreg1 the high half, %envreg2 the low (session 35 had them swapped)
  asm volatile("mov.u32 %0, %%envreg1;" : "=r"(hi));
  asm volatile("mov.u32 %0, %%envreg2;" : "=r"(lo));
  unsigned long long p = ((unsigned long long)hi << 32) | lo;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = p;
    if (p) {
      volatile unsigned* w = (volatile unsigned*)p;
      out[1] = w[0];  // wsSize
      out[2] = w[1];  // barrier
      unsigned n = w[0] / 4;
      out[3] = n > 2 ? w[2] : 0xFFFFFFFFull;      // a word past the barrier, if any
      out[4] = n > 3 ? w[n - 1] : 0xFFFFFFFFull;  // the last word
      if (write && n > 2) w[2] = w[2] + 1;  // a word past the barrier (the barrier itself is read, never written:
                                             // a write there breaks the grid.sync below)
    }
  }
  if (sync) cg::this_grid().sync();
}
// Host memory a kernel can reach: with HMM (open kernel modules, CUDA 12.2+) a kernel may dereference
// any pageable address of its process. The executor keeps what must outlive a call's kernels (the
// module globals' load-time images) in host memory on the premise that it cannot.
__global__ void poke(unsigned* host) { host[0] = 0xC0FFEEu; }

// A kernel's parameters are addressable (cvta.param; __grid_constant__ takes their address): a write
// there that a graph's next replay finds would be a slot of state between calls outside the reset.
__global__ void bump(unsigned* out, const __grid_constant__ unsigned slot) {
  const unsigned i = atomicAdd(out, 1u);
  out[1 + i] = slot;
  *(volatile unsigned*)&slot = slot + 1;
}

// 1b. The same slot found without an address: a graph's kernel parameters sit in device memory the
//    driver keeps for the graph; a kernel that scans the 2 MiB region around a small buffer of its
//    own (mapped whole) for its own 64-bit argument, and rewrites what it finds, would reach them
//    if the driver keeps them there.
__global__ void hunt(unsigned long long* buf, unsigned long long magic, unsigned long long* out) {
  const unsigned long long base = (unsigned long long)buf & ~((1ull << 21) - 1);
  volatile unsigned long long* p = (volatile unsigned long long*)base;
  if (blockIdx.x == 0 && threadIdx.x == 0) out[1 + atomicAdd((unsigned*)out, 1u)] = magic;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (1u << 21) / 8; i += gridDim.x * blockDim.x)
    if (p[i] == magic) {
      p[i] = magic + 1;
      atomicAdd(out + 15, 1ull);
    }
}

void params_found_by_scan() {
  unsigned long long *buf, *out;
  cudaMalloc(&buf, 256);
  cudaMallocManaged(&out, 16 * 8);
  for (int i = 0; i < 16; ++i) out[i] = 0;
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  hunt<<<64, 256, 0, s>>>(buf, 0x5CA7C0DE00000000ull, out);
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  cudaError_t e = cudaSuccess;
  for (int r = 0; r < 4 && e == cudaSuccess; ++r) e = cudaGraphLaunch(ge, s);
  cudaError_t se = cudaStreamSynchronize(s);
  printf("param slot by scan, 4 graph replays: %s/%s: copies of the argument rewritten %llu; the replays saw %#llx %#llx %#llx %#llx\n",
         cudaGetErrorString(e), cudaGetErrorString(se), out[15], out[1], out[2], out[3], out[4]);
}

void params_between_replays() {
  unsigned* out;
  cudaMallocManaged(&out, 64);
  for (int graph = 0; graph < 2; ++graph) {
    for (int i = 0; i < 16; ++i) out[i] = 0;
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaError_t e = cudaSuccess;
    if (graph) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
      bump<<<1, 1, 0, s>>>(out, 0u);
      cudaStreamEndCapture(s, &g);
      cudaGraphInstantiate(&ge, g, 0);
      for (int r = 0; r < 4 && e == cudaSuccess; ++r) e = cudaGraphLaunch(ge, s);
    } else {
      for (int r = 0; r < 4; ++r) bump<<<1, 1, 0, s>>>(out, 0u);
    }
    cudaError_t se = cudaStreamSynchronize(s);
    printf("param slot, %s: %s/%s: the launches saw %u %u %u %u (0 0 0 0: nothing carried)\n", graph ? "4 graph replays" : "4 launches",
           cudaGetErrorString(e), cudaGetErrorString(se), out[1], out[2], out[3], out[4]);
    if (se != cudaSuccess) return;
  }
}

// 4. The shared memory a block reserves for the system (sm_80 and later: %reserved_smem_offset_begin
//    to _end, 1 KiB), which the shared-memory scrub (one block per SM taking the most dynamic shared
//    memory a block may) never writes: does a tag written there by one kernel reach the next, also
//    across a kernel shaped like the scrub?
__device__ void reserved_range(unsigned& b, unsigned& e) {
  asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(b));
  asm volatile("mov.u32 %0, %%reserved_smem_offset_end;" : "=r"(e));
}
__global__ void reserved_write(unsigned tag) {
  unsigned b, e;
  reserved_range(b, e);
  for (unsigned off = b + 4 * threadIdx.x; off + 4 <= e; off += 4 * blockDim.x)
    asm volatile("st.volatile.shared.u32 [%0], %1;" ::"r"(off), "r"(tag ^ off));
}
__global__ void reserved_read(unsigned tag, unsigned long long* kept, unsigned* range) {
  unsigned b, e;
  reserved_range(b, e);
  if (blockIdx.x == 0 && threadIdx.x == 0) { range[0] = b; range[1] = e; }
  unsigned c = 0;
  for (unsigned off = b + 4 * threadIdx.x; off + 4 <= e; off += 4 * blockDim.x) {
    unsigned v;
    asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"(off));
    c += v == (tag ^ off);
  }
  atomicAdd(kept, (unsigned long long)c);
}
__global__ void like_the_scrub(unsigned words, int below_too) {
  extern __shared__ unsigned sm[];
  volatile unsigned* v = sm;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) v[i] = 0x5C4B0000u ^ i;
  if (!below_too) return;  // since session 36 the scrub also fills its window below the array:
  unsigned below;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(below) : "l"(sm));
  for (unsigned off = 4 * threadIdx.x; off + 4 <= below; off += 4 * blockDim.x)
    asm volatile("st.volatile.shared.u32 [%0], %1;" ::"r"(off), "r"(0x5C4B0000u ^ off));
}
void reserved_shared(int sms) {
  int optin = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  cudaFuncSetAttribute(like_the_scrub, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  unsigned long long* kept;
  unsigned* range;
  cudaMallocManaged(&kept, 8);
  cudaMallocManaged(&range, 8);
  const char* between[] = {"", ", a scrub-shaped kernel between (dynamic array only)",
                           ", a scrub-shaped kernel between (dynamic array and the window below it)"};
  for (int scrub = 0; scrub < 3; ++scrub) {
    *kept = 0;
    reserved_write<<<sms * 8, 256>>>(0xAB120000u);
    if (scrub) like_the_scrub<<<sms, 1024, optin>>>(unsigned(optin / 4), scrub == 2);
    reserved_read<<<sms * 8, 256>>>(0xAB120000u, kept, range);
    cudaError_t e = cudaDeviceSynchronize();
    printf("reserved shared memory [%u, %u) x %d blocks%s: %s, %llu words still tagged\n", range[0], range[1], sms * 8,
           between[scrub], cudaGetErrorString(e), *kept);
    if (e != cudaSuccess) return;
  }
}

// 5. Which module variables cuModuleGetGlobal finds by the name the cubin's symbol table gives (the
//    executor restores every writable one before each call and skips one it cannot find): a static
//    one (internal linkage, a local ELF symbol), a namespace-scope one, and the table sinf's slow path
//    brings in (__cudart_i2opi_f).
void module_variables_by_name() {
  const char* src =
      "static __device__ int s_counter;\n__device__ int g_counter;\n"
      "extern \"C\" __global__ void k(float* x) { s_counter++; g_counter++; x[0] = sinf(x[0] * 1e6f); }\n";
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, src, "m.cu", 0, nullptr, nullptr);
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  char arch[32];
  snprintf(arch, sizeof arch, "-arch=sm_%d%d", major, minor);
  const char* opts[] = {arch};
  nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
  size_t n = 0;
  nvrtcGetCUBINSize(prog, &n);
  char* cubin = (char*)malloc(n);
  nvrtcGetCUBIN(prog, cubin);
  cudaFree(0);  // the runtime's primary context, current
  CUmodule m;
  CUresult lr = cuModuleLoadData(&m, cubin);
  printf("module variables: nvrtc %d, load %d\n", (int)r, (int)lr);
  if (lr != CUDA_SUCCESS) return;
  for (const char* name : {"_ZL9s_counter", "s_counter", "g_counter", "__cudart_i2opi_f"}) {
    CUdeviceptr p = 0;
    size_t size = 0;
    CUresult gr = cuModuleGetGlobal(&p, &size, m, name);
    // Where the variable's memory ends (the executor restores a section whole, to its sh_size; the
    // bytes after the section up to the allocation's end are reachable by writing past the last one).
    CUdeviceptr base = 0;
    size_t range = 0;
    CUresult ar = gr == CUDA_SUCCESS ? cuMemGetAddressRange(&base, &range, p) : gr;
    printf("  cuModuleGetGlobal(%s): %d, %zu bytes at 0x%llx; cuMemGetAddressRange %d: +%lld of %zu bytes\n", name, (int)gr, size,
           (unsigned long long)p, (int)ar, (long long)(p - base), range);
  }
  // A second module: do its variables follow the first's in the same allocation?
  CUmodule m2;
  if (cuModuleLoadData(&m2, cubin) == CUDA_SUCCESS) {
    CUdeviceptr p = 0, base = 0;
    size_t size = 0, range = 0;
    cuModuleGetGlobal(&p, &size, m2, "g_counter");
    CUresult ar = cuMemGetAddressRange(&base, &range, p);
    printf("  a second load's g_counter at 0x%llx; cuMemGetAddressRange %d: +%lld of %zu bytes\n", (unsigned long long)p, (int)ar,
           (long long)(p - base), range);
  }
}

void host_memory() {
  int pageable = -1, host_tables = -1;
  cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0);
  cudaDeviceGetAttribute(&host_tables, cudaDevAttrPageableMemoryAccessUsesHostPageTables, 0);
  printf("pageable memory access: %d (uses host page tables: %d)\n", pageable, host_tables);
  if (pageable == 1) {
    unsigned* h = (unsigned*)malloc(4096);
    h[0] = 0;
    poke<<<1, 1>>>(h);
    cudaError_t pe = cudaDeviceSynchronize();
    printf("a kernel wrote a malloc'd host word: %s, it holds %#x\n", cudaGetErrorString(pe), h[0]);
  }
}

void grid_workspace() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  unsigned long long* out;
  cudaMallocManaged(&out, 64);
  cudaStream_t s2;
  cudaStreamCreate(&s2);
  for (int i = 0; i < 6; ++i) {
    int write = i < 4;
    int sync = 1;
    void* args[] = {&out, &write, &sync};
    cudaStream_t s = i == 5 ? s2 : 0;
    cudaError_t e = cudaLaunchCooperativeKernel((void*)probe, dim3(sms), dim3(128), args, 0, s);
    cudaDeviceSynchronize();
    printf("launch %d (%s, stream %s): %s ptr=%#llx wsSize=%llu barrier=%#llx word2=%#llx last=%#llx\n", i,
           write ? "writes" : "reads", i == 5 ? "2" : "0", cudaGetErrorString(e), out[0], out[1], out[2], out[3], out[4]);
  }
  // A plain (non-cooperative) launch: what %envreg1/2 hold there.
  int write = 0;
  probe<<<1, 32>>>(out, write, 0);
  cudaError_t e = cudaDeviceSynchronize();
  printf("plain launch: %s ptr=%#llx\n", cudaGetErrorString(e), out[0]);
}

// One probe per process (a probe that kills its context leaves the others theirs): `state_probe N`
// runs probe N; no argument runs each in a child of its own, in the order below.

// 6. Predicate registers. pred_mark sets seven predicates from the bits of `pattern`, all live at once
//    (each used after all are set), and leaves them at exit; pred_look sets its seven only under a
//    predicate that is false at run time (flag 0), so it reads what its slot's predicates held, and
//    counts the threads whose seven bits equal `pattern`. Chance: 1 in 128. Between them, optionally,
//    a kernel shaped like the register scrub (64 registers, a few predicates of its own).
__global__ void pred_mark(unsigned pattern, unsigned* never) {
  unsigned v = 0;
  asm volatile(
      "{\n\t.reg .pred m<7>;\n\t.reg .b32 t;\n\t"
      "and.b32 t, %1, 1;\n\tsetp.ne.u32 m0, t, 0;\n\tand.b32 t, %1, 2;\n\tsetp.ne.u32 m1, t, 0;\n\t"
      "and.b32 t, %1, 4;\n\tsetp.ne.u32 m2, t, 0;\n\tand.b32 t, %1, 8;\n\tsetp.ne.u32 m3, t, 0;\n\t"
      "and.b32 t, %1, 16;\n\tsetp.ne.u32 m4, t, 0;\n\tand.b32 t, %1, 32;\n\tsetp.ne.u32 m5, t, 0;\n\t"
      "and.b32 t, %1, 64;\n\tsetp.ne.u32 m6, t, 0;\n\t"
      "@m6 add.u32 %0, %0, 64;\n\t@m5 add.u32 %0, %0, 32;\n\t@m4 add.u32 %0, %0, 16;\n\t@m3 add.u32 %0, %0, 8;\n\t"
      "@m2 add.u32 %0, %0, 4;\n\t@m1 add.u32 %0, %0, 2;\n\t@m0 add.u32 %0, %0, 1;\n\t}"
      : "+r"(v) : "r"(pattern));
  if (v != pattern && never) *never = v;  // never: v is pattern
}
__global__ void pred_look(unsigned pattern, unsigned flag, unsigned long long* equal) {
  unsigned v = 0;
  asm volatile(
      "{\n\t.reg .pred m<7>, q;\n\tsetp.ne.u32 q, %1, 0;\n\t"
      "@q setp.eq.u32 m0, %1, 3;\n\t@q setp.eq.u32 m1, %1, 5;\n\t@q setp.eq.u32 m2, %1, 7;\n\t@q setp.eq.u32 m3, %1, 9;\n\t"
      "@q setp.eq.u32 m4, %1, 11;\n\t@q setp.eq.u32 m5, %1, 13;\n\t@q setp.eq.u32 m6, %1, 15;\n\t"
      "@m6 add.u32 %0, %0, 64;\n\t@m5 add.u32 %0, %0, 32;\n\t@m4 add.u32 %0, %0, 16;\n\t@m3 add.u32 %0, %0, 8;\n\t"
      "@m2 add.u32 %0, %0, 4;\n\t@m1 add.u32 %0, %0, 2;\n\t@m0 add.u32 %0, %0, 1;\n\t}"
      : "+r"(v) : "r"(flag));
  atomicAdd(equal, (unsigned long long)(v == pattern));
}
__global__ void __launch_bounds__(256, 4) like_the_register_scrub(unsigned long long seed, volatile unsigned* never) {
  unsigned r[58];
  unsigned x = (unsigned)seed ^ (blockIdx.x * blockDim.x + threadIdx.x);
#pragma unroll
  for (int i = 0; i < 58; ++i) { x ^= x >> 15; x *= 0x2C1B3C6Du; x ^= x >> 12; r[i] = x; }
  if (x == 0x5EED5EEDu && never) {
#pragma unroll
    for (int i = 57; i >= 0; --i) *never = r[i];
  }
}
void predicates(int sms) {
  unsigned long long* equal;
  cudaMallocManaged(&equal, 8);
  const unsigned long long threads = (unsigned long long)sms * 8 * 256;
  for (int between = 0; between < 2; ++between)
    for (unsigned pattern : {0x5Au, 0x25u}) {
      *equal = 0;
      pred_mark<<<sms * 8, 256>>>(pattern, nullptr);
      if (between) like_the_register_scrub<<<sms * 4, 256>>>(0x1234567ull, nullptr);
      pred_look<<<sms * 8, 256>>>(pattern, 0, equal);
      cudaError_t e = cudaDeviceSynchronize();
      printf("predicates, pattern 0x%02x%s: %s, %llu of %llu threads read it (chance: %llu)\n", pattern,
             between ? ", a register-scrub-shaped kernel between" : "", cudaGetErrorString(e), *equal, threads, threads / 128);
      if (e != cudaSuccess) return;
    }
}

// 8. Uniform registers (UR0-UR63 per warp, sm_75 and later), which PTX cannot name and the register
//    scrub does not aim at: ur_mark keeps 24 tagged values computed only from a parameter (warp-
//    uniform work ptxas gives the uniform datapath) live to a store that never runs; ur_look moves a
//    parameter into 24 registers only under a uniform predicate that is false at run time and counts
//    the tags it reads. Whether either lands in uniform registers is ptxas's choice: the SASS
//    (state_probe.sass, cuobjdump) says. Chance: about 0.
__global__ void ur_mark(unsigned a, unsigned* never) {
  unsigned v[24];
  unsigned x = a;
#pragma unroll
  for (int i = 0; i < 24; ++i) {
    x = (x * 0x2C1B3C6Du + 0x1234567u) ^ (x >> 13);
    v[i] = 0xB7E10000u | (x & 0xFFFFu);
  }
  if (x == 0x5EED5EEDu && never) {
#pragma unroll
    for (int i = 23; i >= 0; --i) *(volatile unsigned*)never = v[i];
  }
}
__global__ void ur_look(unsigned flag, unsigned a, unsigned long long* tagged) {
  unsigned n = 0;
  asm volatile(
      "{\n\t.reg .b32 u<24>;\n\t.reg .b32 t;\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\t"
      "@q mov.u32 u0, %2;\n\t@q mov.u32 u1, %2;\n\t@q mov.u32 u2, %2;\n\t@q mov.u32 u3, %2;\n\t"
      "@q mov.u32 u4, %2;\n\t@q mov.u32 u5, %2;\n\t@q mov.u32 u6, %2;\n\t@q mov.u32 u7, %2;\n\t"
      "@q mov.u32 u8, %2;\n\t@q mov.u32 u9, %2;\n\t@q mov.u32 u10, %2;\n\t@q mov.u32 u11, %2;\n\t"
      "@q mov.u32 u12, %2;\n\t@q mov.u32 u13, %2;\n\t@q mov.u32 u14, %2;\n\t@q mov.u32 u15, %2;\n\t"
      "@q mov.u32 u16, %2;\n\t@q mov.u32 u17, %2;\n\t@q mov.u32 u18, %2;\n\t@q mov.u32 u19, %2;\n\t"
      "@q mov.u32 u20, %2;\n\t@q mov.u32 u21, %2;\n\t@q mov.u32 u22, %2;\n\t@q mov.u32 u23, %2;\n\t"
#define CA_UR_COUNT(I) "shr.u32 t, u" #I ", 16;\n\tsetp.eq.u32 p, t, 0xB7E1;\n\t@p add.u32 %0, %0, 1;\n\t"
      CA_UR_COUNT(0) CA_UR_COUNT(1) CA_UR_COUNT(2) CA_UR_COUNT(3) CA_UR_COUNT(4) CA_UR_COUNT(5) CA_UR_COUNT(6) CA_UR_COUNT(7)
      CA_UR_COUNT(8) CA_UR_COUNT(9) CA_UR_COUNT(10) CA_UR_COUNT(11) CA_UR_COUNT(12) CA_UR_COUNT(13) CA_UR_COUNT(14)
      CA_UR_COUNT(15) CA_UR_COUNT(16) CA_UR_COUNT(17) CA_UR_COUNT(18) CA_UR_COUNT(19) CA_UR_COUNT(20) CA_UR_COUNT(21)
      CA_UR_COUNT(22) CA_UR_COUNT(23)
#undef CA_UR_COUNT
      "}"
      : "+r"(n) : "r"(flag), "r"(a));
  atomicAdd(tagged, (unsigned long long)n);
}
void uniform_registers(int sms) {
  unsigned long long* tagged;
  cudaMallocManaged(&tagged, 8);
  const unsigned long long reads = (unsigned long long)sms * 8 * 256 * 24;
  for (int between = 0; between < 2; ++between) {
    *tagged = 0;
    ur_mark<<<sms * 8, 256>>>(0x9E3779B9u, nullptr);
    if (between) like_the_register_scrub<<<sms * 4, 256>>>(0x1234567ull, nullptr);
    ur_look<<<sms * 8, 256>>>(0, 0, tagged);
    cudaError_t e = cudaDeviceSynchronize();
    printf("uniform registers%s: %s, %llu tagged words in %llu reads\n", between ? ", a register-scrub-shaped kernel between" : "",
           cudaGetErrorString(e), *tagged, reads);
    if (e != cudaSuccess) return;
  }
}

// 7. Every %envreg (0-31; the rules leave them legal, since grid.sync reads 1 and 2): does any differ
//    from one launch to the next (a launch counter, as %gridid was), or between a launch, a graph
//    replay and a cooperative launch?
#define CA_ENVREG(N) asm volatile("mov.u32 %0, %%envreg" #N ";" : "=r"(r[N]))
__global__ void envregs(unsigned* out) {
  unsigned r[32];
  CA_ENVREG(0); CA_ENVREG(1); CA_ENVREG(2); CA_ENVREG(3); CA_ENVREG(4); CA_ENVREG(5); CA_ENVREG(6); CA_ENVREG(7);
  CA_ENVREG(8); CA_ENVREG(9); CA_ENVREG(10); CA_ENVREG(11); CA_ENVREG(12); CA_ENVREG(13); CA_ENVREG(14); CA_ENVREG(15);
  CA_ENVREG(16); CA_ENVREG(17); CA_ENVREG(18); CA_ENVREG(19); CA_ENVREG(20); CA_ENVREG(21); CA_ENVREG(22); CA_ENVREG(23);
  CA_ENVREG(24); CA_ENVREG(25); CA_ENVREG(26); CA_ENVREG(27); CA_ENVREG(28); CA_ENVREG(29); CA_ENVREG(30); CA_ENVREG(31);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (int i = 0; i < 32; ++i) out[i] = r[i];
}
void envreg_values(int sms) {
  unsigned* out;
  cudaMallocManaged(&out, 32 * 4 * 8);
  const char* how[8] = {"launch", "launch", "launch", "coop", "coop", "graph", "graph", "launch, stream 2"};
  cudaStream_t s2;
  cudaStreamCreate(&s2);
  cudaGraphExec_t exec = nullptr;
  for (int i = 0; i < 8; ++i) {
    unsigned* o = out + 32 * i;
    cudaError_t e = cudaSuccess;
    if (i < 3) envregs<<<sms, 128>>>(o);
    else if (i < 5) {
      void* args[] = {&o};
      e = cudaLaunchCooperativeKernel((void*)envregs, dim3(sms), dim3(128), args, 0, 0);
    } else if (i < 7) {
      if (!exec) {
        cudaGraph_t g;
        cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal);
        unsigned* og = out + 32 * 5;
        envregs<<<sms, 128, 0, s2>>>(og);
        cudaStreamEndCapture(s2, &g);
        cudaGraphInstantiate(&exec, g, 0);
      }
      e = cudaGraphLaunch(exec, s2);
      cudaStreamSynchronize(s2);
      if (i == 5) memcpy(out + 32 * 6, out + 32 * 5, 128);  // the first replay's, kept; the second overwrites slot 5
    } else {
      envregs<<<sms, 128, 0, s2>>>(o);
    }
    cudaError_t se = cudaDeviceSynchronize();
    printf("envregs, %s: %s/%s\n", how[i], cudaGetErrorString(e), cudaGetErrorString(se));
    if (se != cudaSuccess) return;
  }
  for (int r = 0; r < 32; ++r) {
    bool same = true;
    for (int i = 1; i < 8; ++i) same = same && out[32 * i + r] == out[r];
    printf("  %%envreg%d:%s", r, same ? " same" : "");
    if (!same)
      for (int i = 0; i < 8; ++i) printf(" %s=%#x", how[i], out[32 * i + r]);
    printf("\n");
  }
}

int main(int argc, char** argv) {
  const char* order[] = {"5", "6", "8", "7", "1", "1b", "4", "2", "3"};
  if (argc < 2) {
    for (const char* p : order) {
      printf("== probe %s\n", p);
      fflush(stdout);
      const std::string cmd = std::string("\"") + argv[0] + "\" " + p;
      const int rc = system(cmd.c_str());
      printf("== probe %s: exit %d\n", p, rc);
    }
    return 0;
  }
  const std::string which = argv[1];
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  if (which == "5") module_variables_by_name();
  else if (which == "1") params_between_replays();
  else if (which == "1b") params_found_by_scan();
  else if (which == "4") reserved_shared(sms);
  else if (which == "2") host_memory();
  else if (which == "3") grid_workspace();
  else if (which == "6") predicates(sms);
  else if (which == "7") envreg_values(sms);
  else if (which == "8") uniform_registers(sms);
  else return 1;
  return 0;
}
