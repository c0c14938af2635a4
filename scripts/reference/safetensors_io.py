"""Minimal safetensors writer/reader for the reference scripts (stdlib + torch).

The Python `safetensors` package is not in Debian 12; this follows the published format:
u64 little-endian header size, JSON header (name -> dtype, shape, data_offsets; optional
__metadata__ of strings), padded with spaces to 8 bytes, then the tensors back to back.
"""
import json
import struct
import torch


def save(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base, out = 8 + n, {}
    for name, e in header.items():
        assert e["dtype"] == "F32", name
        a, b = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[base + a:base + b]), dtype=torch.float32).reshape(e["shape"])
    return out, meta
