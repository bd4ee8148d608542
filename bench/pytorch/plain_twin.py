#!/usr/bin/env python3
"""mantissa's benchmark models written the way a PyTorch user would write them (issue 51), timed as
bench.py times the matched twin: plain attention (q k^T, a causal mask, softmax, times v: no
F.scaled_dot_product_attention), nn.LayerNorm, nn.GELU, the head tied to the token embedding, the cross
entropy on f32 logits; the CNN from nn.Conv2d, nn.BatchNorm2d, F.relu, max pooling and nn.Linear;
PyTorch's default initialisation; torch.optim.AdamW with its defaults (lr 1e-3, weight decay 0.01, no
fused kernel asked for); bf16 as torch.autocast('cpu', torch.bfloat16) over f32 weights. The shapes are
`mantissa bench --model`'s (models.PRESETS). Random batches, made before the clock starts; the median of
--steps steps after --warmup. What it differs in from the matched twin (models.py): docs/performance.md.

  python3 bench/pytorch/plain_twin.py --model gpt-small|gpt-wide|cnn --precision fp32|bf16 [--threads 2]
                                      [--profile N]: N steps under PyTorch's profiler, time by op family

Prints one JSON object, as bench.py does: ms_per_step, ms_min, ms_max, items_per_second, torch version.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import PRESETS  # noqa: E402 (the shapes only)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab=256, **_):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied

    def forward(self, ids):
        b, t = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class Cnn(nn.Module):
    def __init__(self, width=32, classes=10, **_):
        super().__init__()

        def stage(cin, w):
            return nn.ModuleDict({"conv": nn.Conv2d(cin, w, 3, padding=1, bias=False), "bn": nn.BatchNorm2d(w),
                                  "res1": nn.Conv2d(w, w, 3, padding=1, bias=False), "bn1": nn.BatchNorm2d(w),
                                  "res2": nn.Conv2d(w, w, 3, padding=1, bias=False), "bn2": nn.BatchNorm2d(w)})

        self.stages = nn.ModuleList([stage(1, width), stage(width, 2 * width)])
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        for s in self.stages:
            x = F.relu(s["bn"](s["conv"](x)))
            r = s["bn2"](s["res2"](F.relu(s["bn1"](s["res1"](x)))))
            x = F.max_pool2d(F.relu(x + r), 2)
        return self.head(x.mean(dim=(2, 3)))


# PyTorch's ops by the family mantissa's breakdown (`mantissa bench --model ... --json`: "breakdown") puts
# them in, by name: the first pattern an op's name contains wins.
FAMILIES = [
    ("matmul", ("mm", "addmm", "bmm", "linear", "matmul", "baddbmm")),
    ("conv", ("convolution",)),
    ("norm", ("layer_norm", "batch_norm")),
    ("cross_entropy", ("nll_loss", "cross_entropy", "log_softmax")),
    ("softmax", ("softmax",)),
    ("optimizer", ("_foreach", "adam")),
    ("cast", ("_to_copy", "aten::to", "copy_")),
    ("pool", ("pool",)),
    ("embedding", ("embedding",)),
    ("reduce", ("sum", "mean")),
    ("elementwise", ("add", "mul", "div", "gelu", "relu", "threshold", "masked_fill", "where", "sub", "neg", "exp",
                     "fill_", "zero_")),
]


def family(name):
    bare = name.removeprefix("aten::")
    for fam, patterns in FAMILIES:
        if any(p.removeprefix("aten::") in bare if p.startswith("aten::") else p in bare for p in patterns):
            return fam
    return "other"


def profile(step, steps):
    """Each op's self CPU time over `steps` steps, per step: by family and the 12 largest ops (ms)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    t0 = time.perf_counter()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    ops = {}
    for e in prof.key_averages():
        ops[e.key] = ops.get(e.key, 0.0) + e.self_cpu_time_total / 1e3 / steps
    families = {}
    for name, ms in ops.items():
        families[family(name)] = families.get(family(name), 0.0) + ms
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:12]
    return {"profiled_ms_per_step": wall, "families_ms": dict(sorted(families.items(), key=lambda kv: -kv[1])),
            "top_ops_ms": dict(top)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, choices=["gpt-small", "gpt-wide", "cnn"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="instead of timing: N steps under PyTorch's profiler, each op's self CPU time per step by family")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape = PRESETS[args.model]
    b = shape["batch_size"]
    if args.model == "cnn":
        model = Cnn(**shape)
        inputs, targets = torch.randn(b, 1, 28, 28), torch.randint(0, 10, (b,))
    else:
        model = Gpt(**shape)
        inputs = torch.randint(0, 256, (b, shape["block_size"]))
        targets = torch.randint(0, 256, (b * shape["block_size"],))
    model.train()
    opt = torch.optim.AdamW(model.parameters())

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    if args.profile > 0:
        print(json.dumps(profile(step, args.profile) | {"model": args.model, "precision": args.precision, "twin": "plain",
                                                        "threads": torch.get_num_threads(), "torch": torch.__version__}))
        return
    ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(ms)
    items = b * (1 if args.model == "cnn" else shape["block_size"])
    print(json.dumps({"model": args.model, "precision": args.precision, "twin": "plain", "threads": torch.get_num_threads(),
                      "ms_per_step": med, "ms_min": min(ms), "ms_max": max(ms), "items_per_second": items / med * 1e3,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
