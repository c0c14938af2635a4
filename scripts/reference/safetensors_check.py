#!/usr/bin/python3
"""safetensors_check.py - an independent reader and writer of safetensors files,
used to check that libdiloco's checkpoints follow the format and to give our
reader files it did not write.

    safetensors_check.py check FILE [--json]   verify the layout rules, print every
                                               tensor's name, dtype, shape and sum
    safetensors_check.py FILE                  the same as check
    safetensors_check.py write OUT [--json]    write a small F64/F32/F16/BF16 file with
                                               metadata, then check it

The format (https://github.com/huggingface/safetensors): u64 little-endian N, N
bytes of JSON header, then the data region.  The header maps each tensor name to
{"dtype", "shape", "data_offsets": [begin, end]} (byte offsets relative to the data
region) plus an optional "__metadata__" object of string -> string.  Checked here:
N within the file and below 100 MiB, the header starts with '{' and is UTF-8 JSON
without duplicate keys, every entry is well typed, each byte range matches
prod(shape) * dtype size, and the ranges cover the data region exactly (no gaps, no
overlaps).  Padding the header to a multiple of 8 is reported (libdiloco always
pads; the spec only allows it).

Independence: only the Python standard library (struct, json) parses the file.
numpy, if importable, decodes the values (python3-numpy); otherwise struct does.
If PyTorch is importable (python3-torch, 1.13 on Debian 12) every float tensor is
also loaded with torch.frombuffer and compared with the stdlib/numpy decoding, to
show PyTorch reads the bytes unchanged.  The `safetensors` Python package itself is
not packaged for Debian 12, so it is not used.

Exit status: 0 valid, 1 the file breaks a rule (printed as "error: ..."), 2 usage.
"""
import json
import math
import os
import struct
import sys

MAX_HEADER = 100 << 20

# dtype -> (size in bytes, struct code or None, numpy dtype or None, torch dtype name or None)
DTYPES = {
    "BOOL": (1, "?", "bool", "bool"),
    "U8": (1, "B", "<u1", "uint8"),
    "I8": (1, "b", "<i1", "int8"),
    "F8_E5M2": (1, None, None, None),
    "F8_E4M3": (1, None, None, None),
    "I16": (2, "h", "<i2", "int16"),
    "U16": (2, "H", "<u2", None),
    "F16": (2, "e", "<f2", "float16"),
    "BF16": (2, None, None, "bfloat16"),
    "I32": (4, "i", "<i4", "int32"),
    "U32": (4, "I", "<u4", None),
    "F32": (4, "f", "<f4", "float32"),
    "F64": (8, "d", "<f8", "float64"),
    "I64": (8, "q", "<i8", "int64"),
    "U64": (8, "Q", "<u8", None),
}
FLOATS = ("F16", "BF16", "F32", "F64")

try:
    import numpy as np
except ImportError:  # the checker still works, decoding with struct
    np = None
try:
    import torch
except ImportError:
    torch = None


class FormatError(Exception):
    pass


def no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise FormatError("duplicate key %r in the header" % k)
        d[k] = v
    return d


def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def parse(raw):
    """Validates raw (the whole file) and returns (header_len, entries, metadata),
    entries sorted by offset as dicts name/dtype/shape/begin/end."""
    if len(raw) < 8:
        raise FormatError("file is %d bytes, shorter than the 8-byte length field" % len(raw))
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER:
        raise FormatError("header length %d is over the %d-byte limit" % (n, MAX_HEADER))
    if n > len(raw) - 8:
        raise FormatError("header length %d is more than the %d bytes after it" % (n, len(raw) - 8))
    hdr = raw[8:8 + n]
    if not hdr.startswith(b"{"):
        raise FormatError("header does not start with '{'")
    try:
        text = hdr.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError("header is not UTF-8: %s" % e)
    try:
        obj = json.loads(text, object_pairs_hook=no_duplicates)
    except ValueError as e:
        raise FormatError("header is not JSON: %s" % e)
    if not isinstance(obj, dict):
        raise FormatError("header is not a JSON object")
    data_len = len(raw) - 8 - n
    meta = obj.pop("__metadata__", None)
    if meta is not None:
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise FormatError("__metadata__ must be an object of string -> string")
    entries = []
    for order, (name, e) in enumerate(obj.items()):
        where = "tensor %r" % name
        if not isinstance(e, dict):
            raise FormatError("%s: entry is not an object" % where)
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in DTYPES:
            raise FormatError("%s: unknown dtype %r" % (where, dtype))
        if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
            raise FormatError("%s: shape %r is not a list of integers >= 0" % (where, shape))
        if (not isinstance(offs, list) or len(offs) != 2 or not all(is_int(o) and o >= 0 for o in offs)):
            raise FormatError("%s: data_offsets %r are not two integers >= 0" % (where, offs))
        begin, end = offs
        if begin > end or end > data_len:
            raise FormatError("%s: data_offsets [%d, %d] outside the %d-byte data region"
                              % (where, begin, end, data_len))
        numel = math.prod(shape)
        need = numel * DTYPES[dtype][0]
        if end - begin != need:
            raise FormatError("%s: data_offsets [%d, %d] hold %d bytes, shape %s %s needs %d"
                              % (where, begin, end, end - begin, shape, dtype, need))
        entries.append(dict(name=name, dtype=dtype, shape=shape, begin=begin, end=end, order=order))
    entries.sort(key=lambda e: (e["begin"], e["end"], e["order"]))
    at = 0
    for e in entries:
        if e["begin"] != at:
            raise FormatError("tensor %r starts at %d, expected %d (%s)"
                              % (e["name"], e["begin"], at, "overlap" if e["begin"] < at else "gap"))
        at = e["end"]
    if at != data_len:
        raise FormatError("tensors cover %d of the %d data bytes" % (at, data_len))
    return n, entries, meta or {}


def values(raw, base, e):
    """The tensor's values as a list of Python floats/ints (numpy or struct)."""
    size, code, npdt, _ = DTYPES[e["dtype"]]
    buf = raw[base + e["begin"]:base + e["end"]]
    count = (e["end"] - e["begin"]) // size
    if e["dtype"] == "BF16":
        if np is not None:
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            return u.view("<f4").astype(np.float64).tolist()
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack("<%dH" % count, buf)]
    if code is None:
        return None
    if np is not None:
        return np.frombuffer(buf, dtype=npdt).tolist()
    return list(struct.unpack("<%d%s" % (count, code), buf))


def torch_values(raw, base, e):
    """The same tensor read by PyTorch (torch.frombuffer), as float64 values."""
    tname = DTYPES[e["dtype"]][3]
    if torch is None or tname is None:
        return None
    dt = getattr(torch, tname)
    buf = bytearray(raw[base + e["begin"]:base + e["end"]])
    if len(buf) == 0:
        t = torch.empty(e["shape"], dtype=dt)
    else:
        t = torch.frombuffer(buf, dtype=dt).reshape(e["shape"])
    return t.double().flatten().tolist() if t.is_floating_point() else t.flatten().tolist()


def same(a, b):
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


def check(path, as_json):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        n, entries, meta = parse(raw)
    except FormatError as e:
        if as_json:
            print(json.dumps({"ok": False, "error": str(e)}))
        else:
            print("error: %s: %s" % (path, e))
        return 1
    base = 8 + n
    report = {"ok": True, "header_len": n, "padded": n % 8 == 0, "data_start": base,
              "numpy": np is not None, "torch": torch is not None and torch.__version__,
              "metadata": meta, "tensors": []}
    for e in entries:
        vals = values(raw, base, e)
        t = {"name": e["name"], "dtype": e["dtype"], "shape": e["shape"],
             "data_offsets": [e["begin"], e["end"]]}
        if vals is not None:
            finite = [v for v in vals if not (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))]
            t["sum"] = float(math.fsum(finite))
            t["nonfinite"] = len(vals) - len(finite)
            t["first"] = [v if not isinstance(v, float) or math.isfinite(v) else repr(v) for v in vals[:4]]
            tv = torch_values(raw, base, e)
            if tv is not None:
                t["torch_matches"] = same(tv, [float(v) for v in vals])
        report["tensors"].append(t)
    if as_json:
        print(json.dumps(report))
    else:
        print("%s: valid safetensors, header %d bytes%s, data at %d, %d tensors"
              % (path, n, " (padded to 8)" if n % 8 == 0 else " (not padded to 8)", base, len(entries)))
        for k, v in meta.items():
            print("  metadata %s = %s" % (k, v))
        for t in report["tensors"]:
            line = "  %-24s %-5s %-16s" % (t["name"], t["dtype"], t["shape"])
            if "sum" in t:
                line += " sum %.9g" % t["sum"]
            if "torch_matches" in t:
                line += "  torch: %s" % ("same values" if t["torch_matches"] else "DIFFERENT")
            print(line)
        if torch is None:
            print("  (PyTorch not importable: values decoded with %s only)" % ("numpy" if np else "struct"))
    if any(t.get("torch_matches") is False for t in report["tensors"]):
        return 1
    return 0


def bf16_bits(x):
    """float -> bfloat16 bits, round to nearest even (as torch does)."""
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def write(path):
    """A file in the layout the reference implementation writes: tensors ordered by
    dtype size (largest first) then name, header keys sorted (so header order and
    data order differ), header padded with spaces to a multiple of 8."""
    tensors = [  # name, dtype, shape, values
        ("emb.weight", "F32", [3, 4], [i * 0.25 - 1.0 for i in range(12)]),
        ("head.w", "F16", [2, 3], [1.0, -2.0, 0.333251953125, 65504.0, 2.0 ** -24, -0.0]),
        ("norm.bias", "BF16", [4], [1.0, -3.0, 3.140625, 0.5]),
        ("scale", "F64", [], [0.1]),
        ("empty", "F32", [0, 5], []),
    ]
    tensors.sort(key=lambda t: (-DTYPES[t[1]][0], t[0]))
    header, blobs, off = {}, [], 0
    for name, dtype, shape, vals in tensors:
        if dtype == "BF16":
            blob = struct.pack("<%dH" % len(vals), *[bf16_bits(v) for v in vals])
        else:
            blob = struct.pack("<%d%s" % (len(vals), DTYPES[dtype][1]), *vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    header["__metadata__"] = {"format": "pt", "writer": "safetensors_check.py"}
    hdr = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    hdr += b" " * (-len(hdr) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main(argv):
    args = [a for a in argv if a != "--json"]
    as_json = len(args) != len(argv)
    if len(args) == 2 and args[0] == "check":
        return check(args[1], as_json)
    if len(args) == 2 and args[0] == "write":
        write(args[1])
        return check(args[1], as_json)
    if len(args) == 1 and args[0] not in ("check", "write"):
        return check(args[0], as_json)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
