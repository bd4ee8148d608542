#!/usr/bin/env python3
"""How far each NVFP4 row of mantissa's recipe table quantizes from Transformer Engine's reference (issue
53): for each case of tests/golden/nvfp4_te.safetensors (made by tests/golden/make_nvfp4_te_golden.py), the
share of code bytes and block-scale bytes that differ, 1x16 and 16x16 blocks without the Hadamard
transform: nvfp4 (TE's rule: 0 everywhere, as tests/unit/nvfp4_te_test.cpp asserts) and nvfp4-torchao
(torchao's rule, mantissa's nvfp4 before). A measurement, not a test.

  PYTHONPATH=build/python /usr/bin/python3 scripts/nvfp4_te_diff.py
"""
import json
import os
import struct

import numpy as np

import mantissa

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "golden", "nvfp4_te.safetensors")


def main():
    with open(GOLDEN, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__")

    def get(key):
        e = header[key]
        raw = data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
        return np.frombuffer(raw, dtype={"F32": np.float32, "U8": np.uint8}[e["dtype"]]).reshape(e["shape"])

    for recipe in ("nvfp4", "nvfp4-torchao"):
        for key in sorted(k for k in header if k.startswith("te.") and k.endswith(".input") and ".layer." not in k):
            base, x = key[:-len(".input")], get(key)
            for way, block in (("1x16", (1, 16)), ("16x16", (16, 16))):
                q = mantissa.quantize(x, recipe, block=block)
                codes = mantissa.pack_fp4(q.codes.ravel()).reshape(x.shape[0], -1)
                scales = q.scales if block[0] == 1 else np.repeat(q.scales, 16, axis=0)  # TE repeats a 2-D scale per row
                print(f"{recipe} {base} {way}: codes {100 * np.mean(codes != get(f'{base}.{way}.codes')):.2f}% differ, "
                      f"scales {100 * np.mean(scales != get(f'{base}.{way}.scales')):.2f}%")


if __name__ == "__main__":
    main()
