// The shared-memory probe's two kernels, used by bench/smem_probe.py and by the scrub's GPU test
// (tests/kernel-prof/gpu_measure_test.cpp): a writer fills its dynamic shared memory with a pattern
// that depends on the word's index; a reader of the same shape counts the words that still hold
// it, without writing them first. Volatile: the writer's stores are never read by the writer.
extern "C" __global__ void ca_probe_smem_writer(unsigned words, unsigned tag) {
  extern __shared__ unsigned s[];
  volatile unsigned* v = s;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) v[i] = tag ^ (i * 2654435761u);
}

extern "C" __global__ void ca_probe_smem_reader(unsigned words, unsigned tag, unsigned long long* kept) {
  extern __shared__ unsigned s[];
  volatile unsigned* v = s;
  unsigned c = 0;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) c += (v[i] == (tag ^ (i * 2654435761u)));
  atomicAdd(kept, (unsigned long long)c);
}

// The part of a block's shared window below its dynamic array (the system's reserve, 288 bytes on
// the H100 of session 36, and any gap up to the array), which a dynamic-only fill never writes: the
// same pair for it, addressed by shared offset from 0 to the array's shared address.
__device__ unsigned ca_probe_below_dynamic() {
  extern __shared__ unsigned dynamic_part[];
  unsigned below;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(below) : "l"(dynamic_part));
  return below;
}

extern "C" __global__ void ca_probe_reserve_writer(unsigned tag) {
  const unsigned below = ca_probe_below_dynamic();
  for (unsigned off = 4 * threadIdx.x; off + 4 <= below; off += 4 * blockDim.x)
    asm volatile("st.volatile.shared.u32 [%0], %1;" ::"r"(off), "r"(tag ^ (off * 2654435761u)));
}

extern "C" __global__ void ca_probe_reserve_reader(unsigned tag, unsigned long long* kept, unsigned long long* words) {
  const unsigned below = ca_probe_below_dynamic();
  unsigned c = 0, n = 0;
  for (unsigned off = 4 * threadIdx.x; off + 4 <= below; off += 4 * blockDim.x, ++n) {
    unsigned v;
    asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"(off));
    c += v == (tag ^ (off * 2654435761u));
  }
  atomicAdd(kept, (unsigned long long)c);
  atomicAdd(words, (unsigned long long)n);
}
