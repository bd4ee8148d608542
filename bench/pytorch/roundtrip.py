#!/usr/bin/env python3
"""Weights round trip between mantissa and PyTorch, each way checked by a first-step loss:

  1. mantissa trains the char GPT for --steps steps (the Python module) and saves a checkpoint;
  2. `mantissa export CKPT --to pytorch` writes its weights as a state_dict; PyTorch's twin
     (models.Gpt) loads it strictly, and its loss on a batch equals mantissa's first-step loss on the same
     batch from the same weights (a mantissa run started from the exported file with --init-from);
  3. PyTorch continues training for --steps steps (AdamW, the same batches mantissa would draw);
  4. its state_dict, saved as safetensors, starts a mantissa run (Trainer(init_from=...)) whose first-step
     loss equals PyTorch's on that batch.
"Equals": within the precision's first-step tolerance (bench.py's TOLERANCE: 1e-4 relative in fp32, four
bf16 epsilons in bf16). Prints one JSON line per check and exits 1 if one fails.

  PYTHONPATH=build/python python3 bench/pytorch/roundtrip.py [--precision fp32|bf16] [--steps 5]
      [--data TEXT_FILE] [--mantissa build/bin/mantissa]

Needs torch (Debian's python3-torch 1.13 will do) and the mantissa module (`pip install .`, or
PYTHONPATH=build/python).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from bench import TOLERANCE, read_safetensors  # noqa: E402
from train_same import Mt19937_64, windows  # noqa: E402

import mantissa  # noqa: E402

SHAPE = dict(n_layer=2, n_head=2, n_embd=64, block_size=32)
BATCH = 8


def write_safetensors(path, state):
    """A PyTorch state_dict as safetensors.torch.save_file writes it (F32, names sorted)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(state):
        data = state[name].detach().contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(state[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--data", default="/usr/share/games/fortunes/computers")
    p.add_argument("--mantissa", default=os.environ.get("MANTISSA_CLI", "build/bin/mantissa"))
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    with open(args.data, "rb") as f:
        text = f.read()
    train_text = text[:int(len(text) * 0.9)]  # TextCorpus: the first 90% trains
    flags = dict(text=text, precision=args.precision, batch_size=BATCH, lr=1e-3, eval_batches=2, **SHAPE)
    tolerance = TOLERANCE[args.precision]
    low = args.precision == "bf16"
    failed = []

    def loss_of(model, seed):
        """PyTorch's loss on the first batch mantissa draws with this seed."""
        inputs, targets = windows(train_text, BATCH, SHAPE["block_size"], Mt19937_64(seed))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            return F.cross_entropy(model(inputs), targets)

    def check(name, theirs, ours):
        ok = abs(theirs - ours) <= tolerance * abs(ours)
        print(json.dumps({"check": name, "pytorch": theirs, "mantissa": ours, "relative": abs(theirs - ours) / abs(ours),
                          "tolerance": tolerance, "ok": ok}), flush=True)
        if not ok:
            failed.append(name)

    with tempfile.TemporaryDirectory() as tmp:
        # 1-2: mantissa -> PyTorch through a checkpoint and `mantissa export`.
        t = mantissa.Trainer("gpt", steps=args.steps, seed=args.seed, **flags)
        t.run()
        t.save(os.path.join(tmp, "ckpt.safetensors"))
        exported = os.path.join(tmp, "exported.safetensors")
        subprocess.run([args.mantissa, "export", os.path.join(tmp, "ckpt.safetensors"), "--to", "pytorch", exported],
                       check=True, capture_output=True)
        model = models.Gpt(**SHAPE)
        tensors, _ = read_safetensors(exported)
        model.load_state_dict(tensors, strict=True)
        from_export = mantissa.Trainer("gpt", steps=1, seed=args.seed + 1, init_from=exported, **flags)
        check("mantissa checkpoint -> PyTorch", loss_of(model, args.seed + 1).item(), from_export.step()["loss"])

        # 3: PyTorch continues training on the batches mantissa would draw.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        rng = Mt19937_64(args.seed + 2)
        losses = []
        for _ in range(args.steps):
            inputs, targets = windows(train_text, BATCH, SHAPE["block_size"], rng)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
                loss = F.cross_entropy(model(inputs), targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print(json.dumps({"pytorch_continued": losses}), flush=True)

        # 4: PyTorch -> mantissa through a state_dict in safetensors (--init-from), and through load_state_dict.
        state_file = os.path.join(tmp, "pytorch.safetensors")
        write_safetensors(state_file, model.state_dict())
        back = mantissa.Trainer("gpt", steps=1, seed=args.seed + 3, init_from=state_file, **flags)
        check("PyTorch state_dict -> mantissa (init_from)", loss_of(model, args.seed + 3).item(), back.step()["loss"])
        direct = mantissa.Trainer("gpt", steps=1, seed=args.seed + 3, **flags)
        direct.load_state_dict({k: v.detach().numpy() for k, v in model.state_dict().items()})
        check("PyTorch state_dict -> mantissa (load_state_dict)", loss_of(model, args.seed + 3).item(), direct.step()["loss"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
