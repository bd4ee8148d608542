#!/usr/bin/env python3
"""Reads a mantissa training checkpoint with json and struct only (an independent reader).

Usage: check_checkpoint.py FILE
For a bf16 low-precision-model MLP run: every model/fcN.weight is BF16 of the shape the run implies, every
optim/master.K is F32 of the same shape, and each bf16 weight equals its f32 master rounded to nearest
even; the metadata holds the step, the loss-scaler state and the run's configuration. Exits 0 or prints
what differs and exits 1.
"""
import json
import math
import struct
import sys


def main(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__")
    problems = []

    def raw(name):
        begin, end = header[name]["data_offsets"]
        return data[begin:end]

    for key in ("step", "loss_scaler", "run", "optim_step", "data_epoch", "data_position"):
        if key not in meta:
            problems.append("metadata lacks " + key)
    run = json.loads(meta["run"])
    inputs = run["channels"] * run["height"] * run["width"]
    shapes = {"model/fc0.weight": [run["hidden"], inputs], "model/fc1.weight": [run["hidden"], run["hidden"]],
              "model/fc2.weight": [run["classes"], run["hidden"]]}
    weights = sorted(k for k in header if k.startswith("model/") and k.endswith(".weight"))
    for i, name in enumerate(weights):
        e = header[name]
        if e["dtype"] != "BF16" or e["shape"] != shapes.get(name):
            problems.append("%s: %s %s" % (name, e["dtype"], e["shape"]))
            continue
        master = "optim/master.%d" % (2 * i)  # parameters alternate weight, bias
        m = header.get(master)
        if m is None or m["dtype"] != "F32" or m["shape"] != e["shape"]:
            problems.append("%s: no f32 master %s" % (name, master))
            continue
        count = math.prod(e["shape"])
        bf16 = struct.unpack("<%dH" % count, raw(name))
        f32 = struct.unpack("<%dI" % count, raw(master))
        rounded = [((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF for b in f32]
        if list(bf16) != rounded:
            problems.append("%s is not its master rounded to nearest even" % name)
    print("\n".join(problems) if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
