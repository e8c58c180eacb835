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

// The block's system reserve of shared memory (%reserved_smem_offset_begin to _end: [0, 288) on the
// H100s of sessions 36-37), which a fill of the dynamic array alone never writes: the same pair for
// it, addressed by shared offset. No dynamic array is declared here: bench/state_probe.cu 4, whose
// kernels are these, saw the reserve keep tags across a dynamic-only fill, and a pair that declared
// one (session 37, NVRTC) saw none even with no kernel between.
__device__ void ca_probe_reserved_range(unsigned& b, unsigned& e) {
  asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(b));
  asm volatile("mov.u32 %0, %%reserved_smem_offset_end;" : "=r"(e));
}

extern "C" __global__ void ca_probe_reserve_writer(unsigned tag) {
  unsigned b, e;
  ca_probe_reserved_range(b, e);
  for (unsigned off = b + 4 * threadIdx.x; off + 4 <= e; off += 4 * blockDim.x)
    asm volatile("st.volatile.shared.u32 [%0], %1;" ::"r"(off), "r"(tag ^ off));
}

extern "C" __global__ void ca_probe_reserve_reader(unsigned tag, unsigned long long* kept, unsigned long long* words) {
  unsigned b, e;
  ca_probe_reserved_range(b, e);
  unsigned c = 0, n = 0;
  for (unsigned off = b + 4 * threadIdx.x; off + 4 <= e; off += 4 * blockDim.x, ++n) {
    unsigned v;
    asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"(off));
    c += v == (tag ^ off);
  }
  atomicAdd(kept, (unsigned long long)c);
  atomicAdd(words, (unsigned long long)n);
}
