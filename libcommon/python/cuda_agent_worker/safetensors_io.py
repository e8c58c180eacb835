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


def tensor_bytes(t):
    """The raw little-endian bytes of a tensor (copied to the CPU, made contiguous); no numpy, so a
    torch install without it still works."""
    t = t.detach().to("cpu").contiguous()
    dtype_name(t.dtype)
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def write(path, tensors, metadata=None):
    """tensors: dict name -> torch.Tensor. Written to path.tmp and renamed."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        blob = tensor_bytes(t)
        header[name] = {"dtype": dtype_name(t.dtype), "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read(path):
    """Returns (dict name -> CPU torch.Tensor, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: not a safetensors file" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("%s: bad safetensors header length" % path)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    meta = header.pop("__metadata__", {}) or {}
    for name, info in header.items():
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
        if end - start != count * size or base + end > len(data):
            raise ValueError("%s: tensor %s: data_offsets do not match shape and dtype" % (path, name))
        if count == 0:
            out[name] = torch.empty(shape, dtype=dtype)
            continue
        buf = bytearray(data[base + start:base + end])
        out[name] = torch.frombuffer(buf, dtype=dtype).reshape(shape).clone()
    return out, meta
