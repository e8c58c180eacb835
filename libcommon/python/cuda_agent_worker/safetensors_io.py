"""safetensors read/write without the safetensors package: 8-byte LE header length, JSON header
(keys sorted, padded with spaces to a multiple of 8), raw little-endian data. Equal tensors give
byte-identical files, which is what the `inputs` op's reproducibility promise rests on."""
import json
import os
import struct
import sys

import numpy as np
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
# numpy has no bf16/fp8: those travel through an integer view of the same width.
_NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.int16, "I64": np.int64,
       "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
       "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}

if sys.byteorder != "little":  # the format is little-endian; every host we target is too
    raise ImportError("cuda_agent_worker: big-endian hosts are not supported")


def dtype_name(dtype):
    try:
        return _TO_NAME[dtype]
    except KeyError:
        raise ValueError("dtype %s cannot be stored in safetensors" % dtype)


def tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    name = dtype_name(t.dtype)
    if name == "BF16":
        t = t.view(torch.int16)
    elif name.startswith("F8_"):
        t = t.view(torch.uint8)
    return t.numpy().tobytes()


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
        if dt not in _NP:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[base + start:base + end], dtype=_NP[dt]).copy()
        t = torch.from_numpy(arr).reshape(info["shape"])
        if dt == "BF16":
            t = t.view(torch.bfloat16)
        elif dt.startswith("F8_"):
            t = t.view(_FROM_NAME[dt])
        out[name] = t
    return out, meta
