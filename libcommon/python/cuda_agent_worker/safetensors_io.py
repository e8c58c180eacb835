"""safetensors read/write without the safetensors package: 8-byte LE header length, JSON header
(keys sorted, padded with spaces to a multiple of 8), raw little-endian data. Equal tensors give
byte-identical files, which is what the `inputs` op's reproducibility promise rests on."""
import ctypes
import json
import os
import struct
import sys

import torch

_TO_NAME = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
for _attr, _name in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _attr):
        _TO_NAME[getattr(torch, _attr)] = _name
_FROM_NAME = {v: k for k, v in _TO_NAME.items()}
if sys.byteorder != "little":  # the format is little-endian; every host we target is too
    raise ImportError("cuda_agent_worker: big-endian hosts are not supported")


def dtype_name(dtype):
    try:
        return _TO_NAME[dtype]
    except KeyError:
        raise ValueError("dtype %s cannot be stored in safetensors" % dtype)


def _host_view(t):
    """A writable buffer over a contiguous CPU tensor's bytes, of any size (ctypes.string_at takes a C
    int and fails past 2 GiB; a ctypes array over the same memory has no such limit, and no copy)."""
    n = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B") if n else memoryview(b"")


def tensor_bytes(t):
    """The raw little-endian bytes of a tensor (copied to the CPU, made contiguous); no numpy, so a
    torch install without it still works."""
    t = t.detach().to("cpu").contiguous()
    dtype_name(t.dtype)
    return bytes(_host_view(t))


def write(path, tensors, metadata=None):
    """tensors: dict name -> torch.Tensor. Written to path.tmp and renamed. Tensors of any size: each
    is written from its own memory, never through one bytes object."""
    header = {}
    hosts = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        n = t.numel() * t.element_size()
        header[name] = {"dtype": dtype_name(t.dtype), "shape": list(t.shape),
                        "data_offsets": [offset, offset + n]}
        hosts.append(t)
        offset += n
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for t in hosts:
            view = _host_view(t)
            step = 1 << 30  # in pieces: one write of many GiB is cut short by some kernels
            for i in range(0, len(view), step):
                f.write(view[i:i + step])
    os.replace(tmp, path)


def read(path):
    """Returns (dict name -> CPU torch.Tensor, metadata dict). Each tensor is read straight into its
    own memory (one copy, any size)."""
    size_on_disk = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("%s: not a safetensors file" % path)
        (n,) = struct.unpack("<Q", head)
        if n > size_on_disk - 8:
            raise ValueError("%s: bad safetensors header length" % path)
        header = json.loads(f.read(n).decode("utf-8"))
        base = 8 + n
        out = {}
        meta = header.pop("__metadata__", {}) or {}
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            dt = info["dtype"]
            if dt not in _FROM_NAME:
                raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
            dtype = _FROM_NAME[dt]
            start, end = info["data_offsets"]
            shape = [int(d) for d in info["shape"]]
            count = 1
            for d in shape:
                count *= d
            size = torch.empty(0, dtype=dtype).element_size()
            if end - start != count * size or base + end > size_on_disk:
                raise ValueError("%s: tensor %s: data_offsets do not match shape and dtype" % (path, name))
            t = torch.empty(shape, dtype=dtype)
            if count:
                f.seek(base + start)
                view = _host_view(t)
                got = 0
                while got < len(view):
                    k = f.readinto(view[got:])
                    if not k:
                        raise ValueError("%s: tensor %s: file ends early" % (path, name))
                    got += k
            out[name] = t
    return out, meta
