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
