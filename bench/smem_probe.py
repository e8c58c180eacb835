#!/usr/bin/env python3
"""Probe: does shared memory keep what one kernel wrote until a later kernel of the same context?

usage: python3 bench/smem_probe.py            (needs a GPU and CuPy)
The kernels of bench/smem_probe.cu: a writer (one block per SM, each taking the most dynamic shared
memory a block may) fills its shared memory with a pattern; a reader of the same shape counts the
words that still hold it. Between the two: nothing, or a memset of twice the L2 (kernel-prof's
flush). Prints one JSON line per case. Words kept mean a result left in shared memory reaches a
later call; the judge's scrub (libcommon/bundle/executor.cpp) closes that, and
tests/kernel-prof/gpu_measure_test.cpp proves it with the same two kernels.
On the H200 (2026-12-03): all 7,670,784 words kept with nothing between, 119,040 (1.6%) past the
memset, 0 past the scrub (measured at e3dbc8a, whose probe carried a copy of the scrub kernel).
"""
import json
import os
import sys

try:
    import cupy as cp
except Exception as e:  # noqa: BLE001
    print("smem_probe: needs CuPy with a GPU: %s" % e, file=sys.stderr)
    sys.exit(3)


def main():
    dev = cp.cuda.Device()
    attrs = dev.attributes
    sms = attrs["MultiProcessorCount"]
    optin = attrs["MaxSharedMemoryPerBlockOptin"]
    l2 = attrs["L2CacheSize"]
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "smem_probe.cu")).read()
    mod = cp.RawModule(code=src)
    writer = mod.get_function("ca_probe_smem_writer")
    reader = mod.get_function("ca_probe_smem_reader")
    for f in (writer, reader):
        f.max_dynamic_shared_size_bytes = optin
    words = optin // 4
    flush = cp.empty(2 * l2, dtype=cp.uint8)
    kept = cp.zeros(1, dtype=cp.uint64)
    for k, (name, between) in enumerate((("nothing", lambda: None), ("l2_flush_memset", lambda: flush.fill(0)))):
        tag = 0x5EED0000 + k
        kept.fill(0)
        writer((sms,), (1024,), (cp.uint32(words), cp.uint32(tag)), shared_mem=optin)
        between()
        reader((sms,), (1024,), (cp.uint32(words), cp.uint32(tag), kept), shared_mem=optin)
        cp.cuda.runtime.deviceSynchronize()
        print(json.dumps({"kind": "smem-probe", "between": name, "sms": sms, "bytes_per_block": optin,
                          "words_read": sms * words, "words_kept": int(kept.get()[0])}), flush=True)


if __name__ == "__main__":
    main()
