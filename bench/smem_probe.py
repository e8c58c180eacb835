#!/usr/bin/env python3
"""Probe: does shared memory keep what one kernel wrote until a later kernel of the same context?

usage: python3 bench/smem_probe.py            (needs a GPU and CuPy)
A writer kernel (one block per SM, each taking the most dynamic shared memory a block may) fills
its shared memory with a pattern that depends on the word's index; a reader of the same shape
counts the words that still hold the pattern, without writing them first. Between the two:
nothing, a memset of twice the L2 (kernel-prof's flush), or kernel-check's scrub (0xFF). Prints one
JSON line per case: words read, words that still held the pattern. If the first line shows words
kept, a result left in shared memory is a channel between calls, and the scrub must close it.
"""
import json
import sys

try:
    import cupy as cp
except Exception as e:  # noqa: BLE001
    print("smem_probe: needs CuPy with a GPU: %s" % e, file=sys.stderr)
    sys.exit(3)

SRC = r"""
extern "C" __global__ void writer(unsigned words, unsigned tag) {
  extern __shared__ unsigned s[];
  volatile unsigned* v = s;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) v[i] = tag ^ (i * 2654435761u);
}
extern "C" __global__ void reader(unsigned words, unsigned tag, unsigned long long* kept) {
  extern __shared__ unsigned s[];
  volatile unsigned* v = s;
  unsigned c = 0;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) c += (v[i] == (tag ^ (i * 2654435761u)));
  atomicAdd(kept, (unsigned long long)c);
}
extern "C" __global__ void ca_scrub_shared(unsigned words) {
  extern __shared__ unsigned s[];
  volatile unsigned* v = s;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) v[i] = 0xFFFFFFFFu;
}
"""


def main():
    dev = cp.cuda.Device()
    attrs = dev.attributes
    sms = attrs["MultiProcessorCount"]
    optin = attrs["MaxSharedMemoryPerBlockOptin"]
    l2 = attrs["L2CacheSize"]
    mod = cp.RawModule(code=SRC)
    k = {n: mod.get_function(n) for n in ("writer", "reader", "ca_scrub_shared")}
    for f in k.values():
        f.max_dynamic_shared_size_bytes = optin
    words = optin // 4
    flush = cp.empty(2 * l2, dtype=cp.uint8)
    kept = cp.zeros(1, dtype=cp.uint64)

    def between_nothing():
        pass

    def between_flush():
        flush.fill(0)

    def between_scrub():
        k["ca_scrub_shared"]((sms,), (1024,), (cp.uint32(words),), shared_mem=optin)

    for name, between in (("nothing", between_nothing), ("l2_flush_memset", between_flush), ("scrub", between_scrub)):
        tag = 0x5EED0000 + len(name)
        kept.fill(0)
        k["writer"]((sms,), (1024,), (cp.uint32(words), cp.uint32(tag)), shared_mem=optin)
        between()
        k["reader"]((sms,), (1024,), (cp.uint32(words), cp.uint32(tag), kept), shared_mem=optin)
        cp.cuda.runtime.deviceSynchronize()
        print(json.dumps({"kind": "smem-probe", "between": name, "sms": sms, "bytes_per_block": optin,
                          "words_read": sms * words, "words_kept": int(kept.get()[0])}), flush=True)


if __name__ == "__main__":
    main()
