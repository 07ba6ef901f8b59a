"""Writes the seed corpus of the `safetensors` fuzz target (corpus/safetensors/).

Hand-built files (this script knows the format; it does not use kael): every
dtype, rank 0, a zero-size tensor, metadata, a tensor whose file position is
not a multiple of its element size (kael's copy path), bool bytes, and a few
near-misses (truncated data, overlapping offsets) for the parser.
Run: python3 make_seeds.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "corpus", "safetensors")
os.makedirs(OUT, exist_ok=True)


def file(tensors, metadata=None, pad_to=8, data_override=None):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in order."""
    header, data, pos = {}, b"", 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        data += raw
        pos += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    js = json.dumps(header, separators=(",", ":")).encode()
    if pad_to:
        js += b" " * ((-(8 + len(js))) % pad_to)
    return struct.pack("<Q", len(js)) + js + (data if data_override is None else data_override)


def f32(*v):
    return struct.pack(f"<{len(v)}f", *v)


seeds = {
    "f32_matrix": file([("w", "F32", [2, 3], f32(0, 1, 2, 3, 4, 5))]),
    "every_dtype": file([
        ("a", "F64", [2], struct.pack("<2d", 1.5, -2.0)),
        ("b", "I64", [2], struct.pack("<2q", -1, 7)),
        ("c", "F32", [1], f32(3.25)),
        ("d", "I32", [2], struct.pack("<2i", 5, -9)),
        ("e", "F16", [2], struct.pack("<2e", 1.0, -0.5)),
        ("f", "BF16", [1], b"\x80\x3f"),
        ("g", "U8", [3], b"\x01\x02\xff"),
        ("h", "BOOL", [3], b"\x00\x01\x02"),
    ]),
    "scalar_and_empty": file([("s", "F32", [], f32(9)), ("z", "F32", [0, 4], b"")]),
    "metadata": file([("x", "I32", [1], struct.pack("<i", 42))], metadata={"format": "pt", "k": "v"}),
    # u8 first, then f32 at data offset 3: not 4-aligned, copied by kael.
    "misaligned_f32": file([("u", "U8", [3], b"abc"), ("v", "F32", [2], f32(1, 2))]),
    "unpadded_header": file([("w", "F32", [1], f32(7))], pad_to=0),
    "truncated_data": file([("w", "F32", [4], f32(1, 2, 3, 4))], data_override=f32(1, 2)),
    "overlap": b"",
    "empty_header": file([]),
}
# Two tensors over the same bytes (the parser must refuse).
js = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
seeds["overlap"] = struct.pack("<Q", len(js)) + js + f32(1, 2, 3)

for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as fh:
        fh.write(data)
print(f"wrote {len(seeds)} seeds to {OUT}")
