#!/usr/bin/env python3
"""Golden vectors for mantissa's block-scaled quantization (tests/unit/microscale_test.cpp), made by
torchao's reference quantizers on the CPU: MX blocks (E8M0 scales per 32) of every element format
mantissa's MX recipes use, with FLOOR and RCEIL scales (and EVEN for e4m3), and NVFP4 (two-level scales). The inputs hold what the recipes must get right: zeros,
f32 subnormals, the largest finite f32, inf and NaN (MX only: one NaN or inf makes NVFP4's tensor
scale meaningless), all-zero blocks, blocks of one outlier, powers of 2 and their neighbours, values
at the element formats' edges, and ordinary values over 2^-140..2^120. Written to
tests/golden/microscale.safetensors (U8 codes, F32 inputs; torch and torchao versions in the metadata).
The file is committed; run this again only to change the cases (torchao from PyPI, no GPU needed):

  python3 -m pip install torch torchao && python3 tests/golden/make_microscale_golden.py
"""
import json
import os
import struct

import torch
import torchao
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
from torchao.prototype.mx_formats.mx_tensor import to_mx
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

HERE = os.path.dirname(os.path.abspath(__file__))
# The MX element formats by mantissa's names, as torchao's to_mx takes them.
ELEMENTS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m1": torch.float4_e2m1fn_x2,
            "e2m3": DTYPE_FP6_E2M3, "e3m2": DTYPE_FP6_E3M2}  # fp6: one code a byte, the sign in bit 5
RULES = {"floor": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL, "even": ScaleCalculationMode.EVEN}
ROWS, COLS = 512, 256  # 131072 values per MX recipe; NVFP4: 8 tensors of 64 x 256


def write(path, tensors, metadata):
    """A safetensors file (written by hand: no safetensors package needed)."""
    names = {torch.float32: "F32", torch.uint8: "U8"}
    header, blobs, offset = {"__metadata__": {k: str(v) for k, v in metadata.items()}}, b"", 0
    for key, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[key] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs += data
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blobs)


def ordinary(g, rows, cols, lo, hi):
    """Normal values, each row scaled by its own power of 2 in [lo, hi]."""
    x = torch.randn(rows, cols, generator=g)
    e = torch.randint(lo, hi + 1, (rows, 1), generator=g).float()
    return x * torch.exp2(e)


def edges(g, n, finite_only):
    """n values at the edges: powers of 2 and their f32 neighbours, element-format limits, specials."""
    f32 = torch.finfo(torch.float32)
    base = [0.0, -0.0, f32.max, -f32.max, f32.tiny, f32.tiny / 2, 2.0**-149, 448.0, 449.0, 464.0, 57344.0, 6.0, 6.5,
            5.0, 0.25, 0.75, 2.0**-9, 2.0**-10, 2.0**-6 * 0.99]
    if not finite_only:
        base += [float("inf"), float("-inf"), float("nan")]
    p = 2.0 ** torch.randint(-140, 120, (n,), generator=g).float()
    step = torch.randint(-2, 3, (n,), generator=g)
    v = torch.nextafter(p, torch.where(step >= 0, torch.tensor(float("inf")), torch.tensor(0.0)))
    v = torch.where(step == 0, p, v)  # a power of 2, or its neighbour above or below
    v = v * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    idx = torch.randint(0, len(base), (n // 4,), generator=g)
    v[: n // 4] = torch.tensor(base)[idx]
    return v[torch.randperm(n, generator=g)]


def mx_input(g):
    x = ordinary(g, ROWS, COLS, -140, 120)
    x[0:32] = edges(g, 32 * COLS, False).view(32, COLS)  # specials, 32 rows of them
    x[32:40] = 0.0  # all-zero blocks
    x[40:48, 5::32] = 0.0
    x[48:64] = torch.randn(16, COLS, generator=g) * 1e-3  # blocks of one outlier
    x[48:64, 7::32] = 1e4
    x[64:72] = ordinary(g, 8, COLS, -149, -127)  # f32 subnormals
    return x


def nvfp4_inputs(g):
    xs = []
    for k in range(8):
        x = ordinary(g, 64, COLS, -20 - 10 * k, 20)
        if k < 4:
            x[0:8] = edges(g, 8 * COLS, True).view(8, COLS)
        x[8:10] = 0.0
        x[10:12, 3::16] = 5e3  # outliers
        xs.append(x)
    xs[7][0, 0] = torch.finfo(torch.float32).max
    return torch.stack(xs)


def main():
    g = torch.Generator().manual_seed(20261203)
    tensors, x = {}, mx_input(g)
    tensors["mx.input"] = x
    # Each element format with each E8M0 rule mantissa's recipes use, under "mx.ELEMENT.RULE" (the test
    # reads the cases its recipe table needs), and EVEN once.
    cases = [(element, rule) for element in ELEMENTS for rule in ("floor", "rceil")] + [("e4m3", "even")]
    for element, rule in cases:
        scale, data = to_mx(x.clone(), ELEMENTS[element], 32, RULES[rule])
        tensors[f"mx.{element}.{rule}.scales"] = scale.view(torch.uint8)
        tensors[f"mx.{element}.{rule}.codes"] = data.view(torch.uint8)  # fp4: packed two a byte
    xs = nvfp4_inputs(g)
    tensors["nvfp4.input"] = xs
    codes, scales, tscales = [], [], []
    for x in xs:
        ts = per_tensor_amax_to_scale(torch.amax(torch.abs(x)))
        s, d = nvfp4_quantize(x.clone(), 16, ts)
        codes.append(d.view(torch.uint8))
        scales.append(s.view(torch.uint8))
        tscales.append(ts.reshape(1))
    tensors["nvfp4.codes"] = torch.stack(codes)
    tensors["nvfp4.scales"] = torch.stack(scales)
    tensors["nvfp4.tensor_scale"] = torch.cat(tscales).float()
    write(os.path.join(HERE, "microscale.safetensors"), tensors,
          {"torch": torch.__version__, "torchao": torchao.__version__, "seed": 20261203})


if __name__ == "__main__":
    main()
