#!/usr/bin/env python3
"""Trains the char GPT in PyTorch exactly as `mantissa train --model gpt` does, from mantissa's initial
weights and on mantissa's batches, so that the two loss curves can be laid side by side: any difference
is the frameworks', not the start's or the data's.

  python3 bench/pytorch/train_same.py --init W.safetensors --data TEXT [--precision fp32|bf16]
      [--steps 150] [--lr 1e-3] [--warmup 0] [--schedule cosine] [--batch-size 128] [--seed 0]
      [--eval-every 100] [--eval-batches 20] [--threads 2]

W.safetensors: `mantissa bench --model gpt-small --seed S --export W.safetensors ...` (the GPT's initial
weights for that seed and shape; `mantissa train --seed S` starts from the same). What is replicated:
- the text: the file's bytes, the first 90% for training and the rest for validation (TextCorpus::load);
- the batches: windows of block + 1 bytes at offsets drawn by std::mt19937_64 seeded with --seed (the
  validation windows by one seeded with seed + 1000, the same at every evaluation), as TextData does;
- AdamW (betas 0.9, 0.999, eps 1e-8, decoupled weight decay 0.01 on every parameter), the learning
  rate of each update by LrSchedule::warmup_cosine (linear warm-up, cosine to lr / 10);
- bf16: torch.autocast('cpu', dtype=torch.bfloat16) around the forward and the loss, f32 parameters.
Prints a JSON line per step ({"step", "loss"}) and per evaluation ({"step", "val_loss"}).
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from bench import read_safetensors  # noqa: E402


class Mt19937_64:
    """std::mt19937_64: the 64-bit Mersenne Twister of the C++ standard, default-seeded as it is."""

    N, M = 312, 156
    MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.mt = [0] * self.N
        self.mt[0] = seed & self.MASK
        for i in range(1, self.N):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & self.MASK
        self.index = self.N

    def _twist(self):
        upper, lower = 0xFFFFFFFF80000000, 0x7FFFFFFF
        for i in range(self.N):
            x = (self.mt[i] & upper) | (self.mt[(i + 1) % self.N] & lower)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            self.mt[i] = self.mt[(i + self.M) % self.N] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & self.MASK


def windows(text, batch, block, rng):
    """TextCorpus::sample: inputs [batch, block] and targets [batch * block], the next byte of each."""
    span = len(text) - block - 1
    starts = [rng() % (span + 1) for _ in range(batch)]
    rows = torch.stack([torch.frombuffer(bytearray(text[s:s + block + 1]), dtype=torch.uint8) for s in starts]).long()
    return rows[:, :-1], rows[:, 1:].reshape(-1)


def lr_at(step, base, warmup, total, schedule):
    """LrSchedule::warmup_cosine(base, warmup, total, base / 10 or base).at(step), step from 0."""
    low = base / 10 if schedule == "cosine" else base
    if step < warmup:
        return base * (step + 1) / warmup
    t = min(max((step - warmup) / max(total - warmup, 1), 0.0), 1.0)
    return low + (base - low) * 0.5 * (1 + math.cos(math.pi * t))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--init", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--schedule", default="cosine", choices=["cosine", "constant"])
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    tensors, meta = read_safetensors(args.init)
    shape = {k: int(meta[k]) for k in ("n_layer", "n_head", "n_embd", "block_size")}
    model = models.Gpt(**shape, gelu="tanh" if meta.get("gelu") == "tanh" else "none")
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(tensors[name])
    block = shape["block_size"]

    with open(args.data, "rb") as f:
        text = f.read()
    split = int(len(text) * (1 - 0.1))
    train, validation = text[:split], text[split:]

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)
    low = args.precision == "bf16"

    def loss_of(inputs, targets):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            return F.cross_entropy(model(inputs), targets)

    def evaluate(step):
        rng = Mt19937_64(args.seed + 1000)
        total, count = 0.0, 0
        model.eval()
        with torch.no_grad():
            for _ in range(args.eval_batches):
                inputs, targets = windows(validation, args.batch_size, block, rng)
                total += loss_of(inputs, targets).item() * targets.numel()
                count += targets.numel()
        model.train()
        print(json.dumps({"step": step, "val_loss": total / count}), flush=True)

    rng = Mt19937_64(args.seed)
    model.train()
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step - 1, args.lr, args.warmup, args.steps, args.schedule)
        inputs, targets = windows(train, args.batch_size, block, rng)
        loss = loss_of(inputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(json.dumps({"step": step, "loss": loss.item()}), flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            evaluate(step)


if __name__ == "__main__":
    main()
