#!/usr/bin/env python3
"""An independent safetensors reader (json and struct only) for mantissa's tests.

Usage: read_safetensors.py FILE
Checks the file the C++ test wrote: tensor "a" F32 [2, 3] = 0..5, "b" BF16 [4] = 1.5 * i, "c" F16 [3] = -i / 4,
"d" F64 [1] = pi, metadata {"step": "7"}. Exits 0 when all match, else prints what differs and exits 1.
"""
import json
import math
import struct
import sys


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]

    def values(name):
        e = header[name]
        begin, end = e["data_offsets"]
        raw = data[begin:end]
        count = math.prod(e["shape"])
        if e["dtype"] == "F32":
            return list(struct.unpack("<%df" % count, raw))
        if e["dtype"] == "F64":
            return list(struct.unpack("<%dd" % count, raw))
        if e["dtype"] == "F16":
            return list(struct.unpack("<%de" % count, raw))
        if e["dtype"] == "BF16":
            return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack("<%dH" % count, raw)]
        raise ValueError("dtype " + e["dtype"])

    expected = {
        "a": ("F32", [2, 3], [float(i) for i in range(6)]),
        "b": ("BF16", [4], [1.5 * i for i in range(4)]),
        "c": ("F16", [3], [-i / 4 for i in range(3)]),
        "d": ("F64", [1], [math.pi]),
    }
    problems = []
    for name, (dtype, shape, vals) in expected.items():
        e = header.get(name)
        if e is None:
            problems.append("missing " + name)
            continue
        if e["dtype"] != dtype or e["shape"] != shape:
            problems.append("%s: %s %s" % (name, e["dtype"], e["shape"]))
        elif values(name) != vals:
            problems.append("%s: values %s" % (name, values(name)))
    if header.get("__metadata__") != {"step": "7"}:
        problems.append("metadata %s" % header.get("__metadata__"))
    if n % 8 != 0:
        problems.append("header length %d is not a multiple of 8" % n)
    print("\n".join(problems) if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
