"""Device tensors kept by the worker and shared by CUDA IPC (PROTOCOL.md, "Device tensors").

Inputs, references and params of a GPU task stay in the worker's GPU memory under a key the caller
chose; the answer describes each tensor by the IPC handle of the allocation that holds it (the
caching allocator's segment, found with cuMemGetAddressRange) and its offset there. The caller maps
the handle (cuIpcOpenMemHandle), copies or compares on the device, unmaps, and sends `release`.
Nothing goes through the host, so a tensor may be as large as the GPU holds.

The driver is reached with ctypes on libcuda.so.1 (the library torch itself runs on), in the
context torch made current; no CuPy, no extension."""
import ctypes

import torch

from . import safetensors_io

_CU = None


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def _driver():
    global _CU
    if _CU is None:
        cu = ctypes.CDLL("libcuda.so.1")
        cu.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                               ctypes.c_uint64]
        cu.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
        cu.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _CU = cu
    return _CU


def _check(rc, what):
    if rc != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError("%s: CUDA error %d (%s)" % (what, rc, (name.value or b"?").decode()))


def describe(name, t, handles):
    """The record of one device tensor: dtype, shape, bytes, and where it is (handle, offset).
    `handles` caches the handle per allocation base (one segment holds many tensors)."""
    if not t.is_contiguous():
        raise ValueError("%s: a shared tensor must be contiguous" % name)
    n = t.numel() * t.element_size()
    rec = {"dtype": safetensors_io.dtype_name(t.dtype), "shape": list(t.shape), "bytes": n}
    if n == 0:
        return rec
    cu = _driver()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(t.data_ptr())),
           "cuMemGetAddressRange(%s)" % name)
    if base.value not in handles:
        h = _Handle()
        _check(cu.cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(base.value)),
               "cuIpcGetMemHandle(%s) (an allocator with expandable segments cannot share by IPC: unset "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments)" % name)
        handles[base.value] = bytes(h).hex()
    rec["handle"] = handles[base.value]
    rec["offset"] = t.data_ptr() - base.value
    rec["allocation_bytes"] = size.value
    return rec


class Kept(object):
    """Device tensors by key: {"inputs.0": tensor, ...} and the scalars among them."""

    def __init__(self):
        self.entries = {}

    def put(self, key, device, tensors, scalars=None):
        """Keeps `tensors` (name -> tensor, made contiguous on `device`) under `key`, replacing what
        was there; returns the descriptions (after the device finished writing them)."""
        if not isinstance(key, str) or not key:
            raise ValueError("a keep key must be a non-empty string")
        self.release([key])
        kept = {}
        for name, t in tensors.items():
            t = t.detach()
            if t.device != device:
                t = t.to(device)
            kept[name] = t.contiguous()
        torch.cuda.synchronize(device)
        handles = {}
        desc = {name: describe(name, t, handles) for name, t in sorted(kept.items())}
        self.entries[key] = {"tensors": kept, "scalars": dict(scalars or {})}
        return desc

    def get(self, key):
        if key not in self.entries:
            raise KeyError("no device tensors kept under %r (released, or the worker restarted)" % key)
        return self.entries[key]

    def release(self, keys):
        n = 0
        for k in keys:
            if self.entries.pop(k, None) is not None:
                n += 1
        return n

    def bytes(self):
        return sum(t.numel() * t.element_size() for e in self.entries.values() for t in e["tensors"].values())
