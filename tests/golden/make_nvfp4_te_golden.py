#!/usr/bin/env python3
"""Golden vectors of NVFP4 as Transformer Engine computes it (issue 53), made by TE's own reference
quantizer, transformer_engine/pytorch/custom_recipes/reference_nvfp4.py (NVFP4QuantizerRef): plain
PyTorch that runs on the CPU. Importing transformer_engine loads its CUDA extension, so this loads that
one file (and reference_utils.py) from a TE source tree with the few TE classes it subclasses stubbed.

Cases, each a [64, 256] tensor in f32 and in bf16 (what TE quantizes in training), the shapes a user's
tensors have: Gaussian rows; rows with 2% outliers 300x the rest; rows of very different magnitude
(2^-24..2^8, tiny blocks next to large ones); values on a quarter grid (exact e2m1 and e4m3 ties);
all-zero blocks; and one with inf and one with NaN. Each quantized three ways, as TE's quantizer does:
1x16 blocks row-wise and of the transpose (column-wise, its own global amax), 1x16 with the random
Hadamard transform on the transpose (TE's wgrad operand), and 16x16 blocks. Stored per case and way:
the E2M1 codes (two a byte, TE's layout), the E4M3 block scales (bytes) and the global amax (f32), under
"te.CASE.DTYPE.WAY.{codes,scales,amax}" ("_t" for the transposed copy), with TE's commit in the metadata.

And one linear layer's three products as TE's NVFP4 recipe computes them (NVFP4BlockScaling without
stochastic rounding, whose draws no other generator reproduces), by TE's reference GEMM (qgemm: the
dequantized blocks multiplied in f32, block by block, times the global amaxes' alpha), under "te.layer.*":
x [64, 128] and g [64, 32] in bf16, w [32, 128] bf16-representable; y = x w^T (x 1x16, w 16x16), dx = g w
(g 1x16, w's 16x16 copy), dw = g^T x (both column-wise with the Hadamard transform), each in f32.

  python3 -m pip install torch && python3 tests/golden/make_nvfp4_te_golden.py PATH/TO/TransformerEngine
"""
import enum
import importlib.util
import os
import subprocess
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_microscale_golden import write  # noqa: E402 (the one safetensors writer of the golden makers)

ROWS, COLS = 64, 256


def load_te_reference(te_root):
    """reference_nvfp4 from a TE source tree, its TE imports stubbed (no CUDA extension loaded)."""
    package = "transformer_engine.pytorch.custom_recipes"
    for name in ["transformer_engine", "transformer_engine.pytorch", package, "transformer_engine.pytorch.tensor"]:
        sys.modules[name] = types.ModuleType(name)
    quantized = types.ModuleType("transformer_engine.pytorch.quantized_tensor")

    class Quantizer:  # the attributes reference_nvfp4 reads of its base
        def __init__(self, rowwise=True, columnwise=True):
            self.rowwise_usage = rowwise
            self.columnwise_usage = columnwise

    class QuantizedTensorStorage:
        pass

    quantized.Quantizer, quantized.QuantizedTensorStorage = Quantizer, QuantizedTensorStorage
    sys.modules[quantized.__name__] = quantized
    gemm = types.ModuleType(package + ".gemm")  # (products only: its GEMMType and MMParams name arguments)
    gemm.GEMMType = enum.Enum("GEMMType", "FPROP DGRAD WGRAD")
    gemm.MMParams = type("MMParams", (), {})
    sys.modules[gemm.__name__] = gemm
    folder = os.path.join(te_root, "transformer_engine", "pytorch", "custom_recipes")
    modules = {}
    for name in ["reference_utils", "reference_nvfp4"]:
        spec = importlib.util.spec_from_file_location(f"{package}.{name}", os.path.join(folder, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        setattr(sys.modules[package], name, module)
        spec.loader.exec_module(module)
        modules[name] = module
    return modules["reference_nvfp4"], modules["reference_utils"]


def cases(g):
    """The inputs, f32, [ROWS, COLS]."""
    out = {}
    out["gauss"] = torch.randn(ROWS, COLS, generator=g)
    x = torch.randn(ROWS, COLS, generator=g)
    outliers = torch.rand(ROWS, COLS, generator=g) < 0.02
    out["outliers"] = torch.where(outliers, x * 300, x)
    x = torch.randn(ROWS, COLS, generator=g)
    out["magnitudes"] = x * torch.exp2(torch.randint(-24, 9, (ROWS, COLS // 16), generator=g).float()).repeat_interleave(16, 1)
    out["quarter_grid"] = torch.randint(-96, 97, (ROWS, COLS), generator=g).float() / 4
    x = torch.randn(ROWS, COLS, generator=g)
    x[:, 32:48] = 0
    x[8:24, 64:80] = 0
    x[40] = 0
    out["zero_blocks"] = x
    x = torch.randn(ROWS, COLS, generator=g)
    x[3, 7] = float("inf")
    out["inf"] = x
    x = torch.randn(ROWS, COLS, generator=g)
    x[5, 9] = float("nan")
    out["nan"] = x
    return out


def layer_products(ref, utils):
    """A linear layer's forward, data-gradient and weight-gradient products by TE's recipe and reference GEMM."""
    g = torch.Generator().manual_seed(20261206)
    m, k, n = 64, 128, 32  # tokens, in, out
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    x[5, 3] = 40  # an outlier
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    dy = (torch.randn(m, n, generator=g) * 1e-3).to(torch.bfloat16)

    def quantize(t, tile, rht):
        q = ref.NVFP4QuantizerRef(dtype=utils.Fp4Formats.E2M1, rowwise=True, columnwise=True, quant_tile_shape=tile,
                                  with_rht=rht)
        qt, st, qt_t, st_t, amax_row, amax_col = q._quantize(t)
        return q, types.SimpleNamespace(row=(qt, st), col=(qt_t, st_t), global_amax_row=amax_row, global_amax_col=amax_col)

    qi, xq = quantize(x, (1, 16), True)      # TE's input: row-wise for y, the transformed transpose for dw
    _, wq = quantize(w, (16, 16), False)     # the weight: 16 x 16 blocks, its copy the transpose's
    _, gq = quantize(dy, (1, 16), True)      # the gradient: row-wise for dx, the transformed transpose for dw
    gemm = sys.modules["transformer_engine.pytorch.custom_recipes.gemm"].GEMMType

    def product(a, b, kind):  # a [M, K] . b [N, K]^T, as TE's qgemm takes them
        (qa, sa), (qb, sb) = a, b
        return qi.qgemm(qa, qb, None, torch.float32, sa.view(torch.float8_e4m3fn).float(), sb.view(torch.float8_e4m3fn).float(),
                        gemm_type=kind, qresult_x=ops[id(a)], qresult_w=ops[id(b)])

    ops = {}
    for q in (xq, wq, gq):
        ops[id(q.row)] = q
        ops[id(q.col)] = q
    return {"te.layer.x": x.float(), "te.layer.w": w.float(), "te.layer.dy": dy.float(),
            "te.layer.y": product(xq.row, wq.row, gemm.FPROP),
            "te.layer.dx": product(gq.row, wq.col, gemm.DGRAD),
            "te.layer.dw": product(gq.col, xq.col, gemm.WGRAD)}


def main():
    te_root = sys.argv[1]
    ref, utils = load_te_reference(te_root)
    commit = subprocess.run(["git", "-C", te_root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    g = torch.Generator().manual_seed(20261205)
    ways = {"1x16": dict(quant_tile_shape=(1, 16), with_rht=False),
            "1x16_rht": dict(quant_tile_shape=(1, 16), with_rht=True),
            "16x16": dict(quant_tile_shape=(16, 16), with_rht=False)}
    tensors = {}
    for case, x in cases(g).items():
        for dtype in (torch.float32, torch.bfloat16):
            xd = x.to(dtype)
            d = "f32" if dtype == torch.float32 else "bf16"
            tensors[f"te.{case}.{d}.input"] = xd.float()  # (bf16 values are exact in f32)
            for way, options in ways.items():
                q = ref.NVFP4QuantizerRef(dtype=utils.Fp4Formats.E2M1, rowwise=True, columnwise=True, **options)
                qx, sx, qx_t, sx_t, amax, amax_t = q._quantize(xd)
                key = f"te.{case}.{d}.{way}"
                tensors[key + ".codes"] = qx.contiguous()
                tensors[key + ".scales"] = sx.view(torch.uint8).contiguous()
                tensors[key + ".amax"] = amax.float().reshape(1)
                tensors[key + ".codes_t"] = qx_t.contiguous()
                tensors[key + ".scales_t"] = sx_t.view(torch.uint8).contiguous()
                tensors[key + ".amax_t"] = amax_t.float().reshape(1)
    tensors.update(layer_products(ref, utils))
    write(os.path.join(HERE, "nvfp4_te.safetensors"), tensors,
          {"torch": torch.__version__, "transformer_engine": commit, "source": "reference_nvfp4.py NVFP4QuantizerRef._quantize",
           "seed": 20261205})


if __name__ == "__main__":
    main()
