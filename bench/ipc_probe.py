#!/usr/bin/env python3
"""Probe: CUDA IPC between a torch process and a plain driver-API process (ctypes on libcuda).

usage: python3 bench/ipc_probe.py            (needs a GPU)
Prints one JSON line per check: export from torch (cuIpcGetMemHandle on the caching allocator's
block), open in a driver-only child, double open, reverse direction (child allocates, torch wraps
the pointer through __cuda_array_interface__), and the time of each step.
"""
import ctypes
import json
import os
import subprocess
import sys
import time

CU = None


def cu():
    global CU
    if CU is None:
        CU = ctypes.CDLL("libcuda.so.1")
    return CU


def chk(rc, what):
    if rc != 0:
        name = ctypes.c_char_p()
        cu().cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError(f"{what}: {rc} {name.value}")


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def child():
    """Driver-only side: open handles given on stdin, read values, allocate and export one."""
    d = cu()
    chk(d.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    chk(d.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    chk(d.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    chk(d.cuCtxSetCurrent(ctx), "setcurrent")
    req = json.loads(sys.stdin.readline())
    out = {}
    h = Handle()
    h = Handle.from_buffer_copy(bytes.fromhex(req["handle"]))
    ptr = ctypes.c_uint64()
    t0 = time.perf_counter()
    chk(d.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, 1), "open")
    out["open_ms"] = (time.perf_counter() - t0) * 1e3
    buf = (ctypes.c_float * 4)()
    chk(d.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr.value + req["offset"]), 16), "dtoh")
    out["values"] = list(buf)
    ptr2 = ctypes.c_uint64()
    rc = d.cuIpcOpenMemHandle_v2(ctypes.byref(ptr2), h, 1)
    out["second_open_rc"] = rc
    out["second_open_same_ptr"] = rc == 0 and ptr2.value == ptr.value
    if rc == 0:
        out["close2_rc"] = d.cuIpcCloseMemHandle(ptr2)
    out["close_rc"] = d.cuIpcCloseMemHandle(ptr)
    # Large one: 3 GiB
    hb = Handle()
    hb = Handle.from_buffer_copy(bytes.fromhex(req["big_handle"]))
    pb = ctypes.c_uint64()
    t0 = time.perf_counter()
    chk(d.cuIpcOpenMemHandle_v2(ctypes.byref(pb), hb, 1), "open big")
    out["open_big_ms"] = (time.perf_counter() - t0) * 1e3
    buf8 = (ctypes.c_uint8 * 8)()
    chk(d.cuMemcpyDtoH_v2(buf8, ctypes.c_uint64(pb.value + req["big_offset"] + req["big_bytes"] - 8), 8), "dtoh big")
    out["big_tail"] = list(buf8)
    d.cuIpcCloseMemHandle(pb)
    # Reverse: allocate, fill, export.
    mine = ctypes.c_uint64()
    chk(d.cuMemAlloc_v2(ctypes.byref(mine), 1 << 20), "alloc")
    chk(d.cuMemsetD32_v2(mine, 0x3F800000, (1 << 20) // 4), "memset")  # 1.0f
    chk(d.cuCtxSynchronize(), "sync")
    hm = Handle()
    chk(d.cuIpcGetMemHandle(ctypes.byref(hm), mine), "export")
    print(json.dumps({"child": out, "handle": bytes(hm).hex()}), flush=True)
    sys.stdin.readline()  # wait until the parent read it
    d.cuMemFree_v2(mine)


def export(t):
    import torch
    d = cu()
    base = ctypes.c_uint64()
    size = ctypes.c_size_t()
    chk(d.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(t.data_ptr())), "range")
    h = Handle()
    t0 = time.perf_counter()
    chk(d.cuIpcGetMemHandle(ctypes.byref(h), base), "get handle")
    return bytes(h).hex(), t.data_ptr() - base.value, size.value, (time.perf_counter() - t0) * 1e3


class CAI:
    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child()
    import torch
    print(json.dumps({"torch": torch.__version__, "backend": torch.cuda.get_allocator_backend(),
                      "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}), flush=True)
    pad = torch.empty(1000, device="cuda")  # so x is not at its block's base
    x = torch.arange(16, dtype=torch.float32, device="cuda") + 0.5
    big = torch.full((3 << 30,), 7, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    hx, ox, sx, ms = export(x)
    hb, ob, sb, _ = export(big)
    print(json.dumps({"export_ms": ms, "offset": ox, "block": sx, "big_offset": ob, "big_block": sb}), flush=True)
    p = subprocess.Popen([sys.executable, __file__, "--child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(json.dumps({"handle": hx, "offset": ox, "big_handle": hb, "big_offset": ob, "big_bytes": big.numel()}) + "\n")
    p.stdin.flush()
    ans = json.loads(p.stdout.readline())
    print(json.dumps(ans["child"]), flush=True)
    # Reverse: torch opens the child's allocation.
    d = cu()
    h = Handle()
    h = Handle.from_buffer_copy(bytes.fromhex(ans["handle"]))
    ptr = ctypes.c_uint64()
    chk(d.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, 1), "torch side open")
    t = torch.as_tensor(CAI(ptr.value, 1 << 20), device="cuda").view(torch.float32)
    print(json.dumps({"reverse_sum": float(t.sum()), "expected": float(1 << 18), "dtype": str(t.dtype),
                      "device": str(t.device)}), flush=True)
    del t
    d.cuIpcCloseMemHandle(ptr)
    p.stdin.write("done\n")
    p.stdin.flush()
    p.wait()
    # Throughput of a D2D copy of the big block (the runner's upload from an opened handle).
    y = torch.empty_like(big)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    y.copy_(big)
    torch.cuda.synchronize()
    print(json.dumps({"d2d_3GiB_ms": (time.perf_counter() - t0) * 1e3}), flush=True)


if __name__ == "__main__":
    main()
