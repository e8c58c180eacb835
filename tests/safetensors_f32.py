"""A safetensors reader for tests, independent of the toolchain's C++ reader and of the safetensors
package: the 8-byte header length, the JSON header, F32 data. read(path) -> {name: (shape, array('f'))}."""
import array
import json
import struct


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (path, name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = (t["shape"], array.array("f", raw[8 + n + a:8 + n + b]))
    return out
