#!/usr/bin/env python3
"""Makes a damaged copy of a safetensors checkpoint, for tests of what --resume refuses. Written from the
format's definition (8-byte little-endian header length, JSON header, raw data), with json and struct only.

  edit_checkpoint.py IN OUT drop-prefix PREFIX     # remove every tensor whose name starts with PREFIX
  edit_checkpoint.py IN OUT set-meta KEY VALUE     # set a metadata string
  edit_checkpoint.py IN OUT nan NAME               # the first value of an F32 or BF16 tensor becomes NaN
  edit_checkpoint.py IN OUT set-first NAME VALUE   # the first value of an F32 tensor becomes VALUE
  edit_checkpoint.py IN OUT retype NAME BF16       # an F32 tensor stored as BF16 (same shape, values truncated)
"""
import json
import struct
import sys


def load(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    return header, blob[8 + n:]


def save(path, header, tensors):
    """tensors: name -> (entry without offsets, bytes), written in name order."""
    out, data = {}, b""
    if "__metadata__" in header:
        out["__metadata__"] = header["__metadata__"]
    for name in sorted(tensors):
        entry, raw = tensors[name]
        entry = dict(entry)
        entry["data_offsets"] = [len(data), len(data) + len(raw)]
        out[name] = entry
        data += raw
    text = json.dumps(out).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)


def main():
    src, dst, action, *args = sys.argv[1:]
    header, data = load(src)
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        tensors[name] = ({"dtype": e["dtype"], "shape": e["shape"]}, data[b:end])
    if action == "drop-prefix":
        tensors = {k: v for k, v in tensors.items() if not k.startswith(args[0])}
    elif action == "set-meta":
        header.setdefault("__metadata__", {})[args[0]] = args[1]
    elif action == "nan":
        entry, raw = tensors[args[0]]
        nan = struct.pack("<f", float("nan")) if entry["dtype"] == "F32" else b"\xc0\x7f"
        tensors[args[0]] = (entry, nan + raw[len(nan):])
    elif action == "set-first":
        entry, raw = tensors[args[0]]
        assert entry["dtype"] == "F32"
        tensors[args[0]] = (entry, struct.pack("<f", float(args[1])) + raw[4:])
    elif action == "retype":
        entry, raw = tensors[args[0]]
        assert entry["dtype"] == "F32" and args[1] == "BF16"
        # The top half of each little-endian f32: the same shape in another dtype.
        tensors[args[0]] = ({"dtype": "BF16", "shape": entry["shape"]},
                            b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4)))
    else:
        sys.exit("unknown action " + action)
    save(dst, header, tensors)


if __name__ == "__main__":
    main()
