#!/usr/bin/env python3
"""Times training steps of mantissa's benchmark models in plain PyTorch, the way `mantissa bench --model`
times them: forward, backward and AdamW (f32 parameters), fp32, tf32 (GPU), or torch.autocast in bfloat16
or float16 (with GradScaler), on the CPU or the GPU (--device cuda), after warm-up, the median of --steps.
Batches are prepared before the clock starts.

With --init FILE (written by `mantissa bench --model M --precision P --export FILE`) the model starts
from mantissa's weights and first batch, and the first-step loss is compared with mantissa's: the run
fails (exit 1) when they differ by more than the precision's tolerance.

Prints one JSON object: ms_per_step, ms_min, ms_max, torch version and build, first-step losses.
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

# Relative first-step loss tolerance: a loss is a mean over many tokens of log-probabilities computed
# in f32 from matmuls with inputs rounded to the format; a few units of the format's epsilon cover it.
TOLERANCE = {"fp32": 1e-4, "tf32": 4 * 2.0**-11, "bf16": 4 * 2.0**-8, "fp16": 4 * 2.0**-11}


def read_safetensors(path):
    """tensors (name -> float32 tensor) and metadata; F32 only, which is what --export writes."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} is {e['dtype']}, expected F32")
        begin, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32)
        out[name] = t.reshape(e["shape"]) if e["shape"] else t
    return out, meta


def build(args):
    shape = dict(models.PRESETS[args.model])
    for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "width"):
        if getattr(args, k):
            shape[k] = getattr(args, k)
    init = None
    if args.init:
        tensors, meta = read_safetensors(args.init)
        if meta.get("model") != args.model:
            raise SystemExit(f"{args.init}: written for model {meta.get('model')}, not {args.model}")
        for k in shape:
            shape[k] = int(meta.get(k, shape[k]))
        init = (tensors, meta)
    # mantissa's --gelu erf|tanh is PyTorch's approximate="none"|"tanh".
    gelu = init[1].get("gelu", "erf") if init else args.gelu
    torch.manual_seed(args.seed)
    model = models.make(args.model, **shape, gelu="tanh" if gelu == "tanh" else "none")
    if init:
        tensors, meta = init
        params = dict(model.named_parameters())
        missing = set(params) ^ {k for k in tensors if not k.startswith("input.")}
        if missing:
            raise SystemExit(f"{args.init}: parameters differ from the PyTorch model's: {sorted(missing)}")
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(tensors[k])
        targets = torch.tensor(json.loads(meta["targets"]), dtype=torch.long)
        if args.model == "cnn":
            inputs = tensors["input.images"]
        else:
            inputs = torch.tensor(json.loads(meta["inputs"]), dtype=torch.long).reshape(shape["batch_size"], -1)
    else:
        b = shape["batch_size"]
        if args.model == "cnn":
            inputs = torch.randn(b, 1, 28, 28)
            targets = torch.randint(0, 10, (b,))
        else:
            inputs = torch.randint(0, 256, (b, shape["block_size"]))
            targets = torch.randint(0, 256, (b * shape["block_size"],))
    return model, inputs, targets, shape, init


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, choices=sorted(models.PRESETS))
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--init", help="safetensors from `mantissa bench --export`")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gelu", default="erf", choices=["erf", "tanh"], help="gpt: the MLP's GELU (mantissa's --gelu)")
    for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "width"):
        p.add_argument("--" + k.replace("_", "-"), type=int, default=0)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.precision in ("tf32", "fp16") and args.device != "cuda":
        raise SystemExit(f"--precision {args.precision} is timed on the GPU only (--device cuda)")
    gpu = args.device == "cuda"
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"

    model, inputs, targets, shape, init = build(args)
    model.to(args.device)
    inputs, targets = inputs.to(args.device), targets.to(args.device)
    model.train()
    fwd = torch.compile(model) if args.compile else model
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
        fused = True
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)
        fused = False

    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(args.device, enabled=args.precision == "fp16")

    def loss_of():
        with torch.autocast(args.device, dtype=low or torch.bfloat16, enabled=low is not None):
            return F.cross_entropy(fwd(inputs), targets)

    with torch.no_grad():
        first_loss = loss_of().item()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if gpu:
            torch.cuda.synchronize()
        return loss.item()

    for _ in range(args.warmup):
        step()
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    med = statistics.median(ms)
    items = shape["batch_size"] * (1 if args.model == "cnn" else shape["block_size"])
    out = {
        "model": args.model, "precision": args.precision, "threads": torch.get_num_threads(),
        "ms_per_step": med, "ms_min": ms[0], "ms_max": ms[-1], "items_per_second": items / med * 1e3,
        "torch": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
        "mkl": torch.backends.mkl.is_available(), "fused_adamw": fused, "compiled": args.compile,
        "first_loss": first_loss, "device": args.device,
    }
    if gpu:
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
        out["gpu"] = torch.cuda.get_device_name()
    if init:
        theirs = float(init[1]["first_loss"])
        tol = TOLERANCE[args.precision]
        out.update(mantissa_first_loss=theirs, first_loss_rel_diff=abs(first_loss - theirs) / abs(theirs),
                   first_loss_tolerance=tol)
    print(json.dumps(out))
    if init and not out["first_loss_rel_diff"] <= out["first_loss_tolerance"]:
        print(f"first-step loss differs: PyTorch {first_loss:.6f}, mantissa {theirs:.6f} "
              f"(relative {out['first_loss_rel_diff']:.2e} > {out['first_loss_tolerance']:.2e})", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
