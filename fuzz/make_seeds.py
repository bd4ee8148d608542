#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/: small valid inputs of every kind
each reader accepts, and a few broken ones, so that fuzzing starts from the formats' structure instead of
from random bytes. The files are committed; run this again only to change the seeds."""
import gzip
import json
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", n) for n in dims) + bytes(data)


def gz(data):
    return gzip.compress(data, mtime=0)


# IDX: a leading even byte = one file; odd = two bytes of split position, then images + labels.
images = idx([3, 4, 4], range(48))
labels = idx([3], [0, 2, 1])
put("idx", "plain", b"\0" + images)
put("idx", "gzipped", b"\0" + gz(images))
put("idx", "rank4", b"\0" + idx([2, 1, 2, 3], range(12)))
put("idx", "truncated", b"\0" + images[:30])
put("idx", "trailing", b"\0" + labels + b"\xff")
put("idx", "dataset", b"\1" + struct.pack(">H", len(images)) + images + labels)
gz_images = gz(images)
put("idx", "dataset_gzipped", b"\1" + struct.pack(">H", len(gz_images)) + gz_images + gz(labels))
put("idx", "dataset_mismatch", b"\1" + struct.pack(">H", len(images)) + images + idx([2], [0, 1]))


def npy(descr, shape, data):
    """A .npy file as numpy.save writes it (version 1, the header padded to 64 bytes)."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join(f"{n}, " for n in shape))
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


npy_images = npy("|u1", [3, 4, 4], bytes(range(48)))
npy_labels = npy("<i8", [3], struct.pack("<3q", 0, 2, 1))
put("idx", "npy", b"\0" + npy_images)
put("idx", "npy_int64", b"\0" + npy_labels)
put("idx", "dataset_npy", b"\1" + struct.pack(">H", len(npy_images)) + npy_images + npy_labels)


def safetensors(tensors, metadata=None):
    header, blobs, offset = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs += blob
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blobs


f32 = struct.pack("<6f", 1.0, -2.5, 3.0e-8, float("inf"), 0.0, 65504.0)
put("safetensors", "f32_bf16", safetensors(
    [("w", "F32", [2, 3], f32), ("b", "BF16", [3], struct.pack("<3H", 0x3F80, 0xBF00, 0x7F80))],
    {"step": "7", "format": "pt"}))
put("safetensors", "f16_f8", safetensors(
    [("h", "F16", [2], struct.pack("<2H", 0x3C00, 0x7BFF)), ("e4", "F8_E4M3", [4], bytes([0x38, 0x7E, 0xFE, 0])),
     ("e5", "F8_E5M2", [1, 2], bytes([0x3C, 0x7B])), ("d", "F64", [1], struct.pack("<d", 0.1))]))
put("safetensors", "scalar_and_empty", safetensors([("s", "F32", [], struct.pack("<f", 2.0)), ("z", "F32", [0, 5], b"")]))
put("safetensors", "no_tensors", safetensors([], {"k": "v"}))
put("safetensors", "overlap", struct.pack("<Q", 96) + json.dumps(
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
     "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode().ljust(96) + b"\0" * 4)
put("safetensors", "truncated", safetensors([("w", "F32", [2, 3], f32)])[:-5])

# cast: the format's name on the first line, then one value per line.
put("cast", "bf16", b"bf16\n1.5\n0x1.8p3\ninf\n-nan\n1e-40\n3.3895313892515355e38\n-0\n")
put("cast", "fp16", b"fp16\n65504\n65520\n6e-8\n2.98e-8\n  -1.0009765625 \n0x1p-24\n")
put("cast", "e4m3", b"e4m3\n448\n464\n-500\n0.001953125\n1e-3\nnan\n")
put("cast", "e5m2", b"e5m2\n57344\n61440\n1.5258789e-05\n-inf\n")
put("cast", "emulated", b"e3m2\n1.75\n14\n0.0625\n\ne8m0\n3\ne2m1\n0.5\n")
put("cast", "fp32", b"fp32\n1e39\n1.4e-45\n0x1.fffffep127\nnot a number\n")

# text: two bytes of parameters (validation fraction, block size), then the text.
fortune = (b"You will be successful in your work.\n%\nA day for firm decisions!!!!!  Or is it?\n%\n") * 14
put("text", "fortunes", b"\x19\x08" + fortune)
put("text", "short", b"\x19\x08" + b"too short\n")
put("text", "binary", b"\x80\x7f" + bytes(range(256)) * 5)
