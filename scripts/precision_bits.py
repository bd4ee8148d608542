#!/usr/bin/env python3
"""The bits of every precision's run, to show that a change kept them (issue 49: "existing runs keep
their bits"). Runs each case below for 15 steps and prints one line per case: a digest of what each
step recorded that is not a timing (loss, loss scale, gradient norm, skips, the FP8 counters, overall
and per layer, the evaluations) and a digest of the final checkpoint's tensors (weights, optimizer
state, loss scaler, amax histories, rounding counts). Run it before and after a change and diff:

  python3 scripts/precision_bits.py build/bin/mantissa > before.txt   # (and after.txt)
  diff before.txt after.txt
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

TIMING = {"wall_time", "throughput", "peak_bytes", "start_time", "machine", "version", "eta"}

MLP = ["--model", "mlp", "--hidden", "64", "--layers", "2", "--batch-size", "32", "--eval-every", "15"]
GPT = ["--model", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "64", "--block-size", "32", "--batch-size", "4",
       "--eval-every", "15", "--eval-batches", "2"]
CNN = ["--model", "cnn", "--width", "8", "--batch-size", "32", "--eval-every", "15"]  # convolutions, batch norm, pooling
ALL_FP8 = ["--fp8-first-last", "fp8"]

PLAN_DELAYED = {"low": "bf16", "fp8": {"recipe": "delayed"}, "layers": {"fc0": "bf16", "fc1": "fp8", "fc2": "bf16"}}
PLAN_NVFP4 = {"low": "bf16", "fp8": {"recipe": "nvfp4"}, "layers": {"fc0": "fp8", "fc1": "fp8", "fc2": "bf16"}}
# nvfp4 before issue 53 made it Transformer Engine's: its runs' bits are nvfp4-torchao's now.
PLAN_NVFP4_TORCHAO = {"low": "bf16", "fp8": {"recipe": "nvfp4-torchao"}, "layers": {"fc0": "fp8", "fc1": "fp8", "fc2": "bf16"}}

CASES = [
    ("mlp fp32", MLP + ["--precision", "fp32"]),
    ("mlp bf16", MLP + ["--precision", "bf16"]),
    ("mlp fp16", MLP + ["--precision", "fp16"]),
    ("mlp bf16 lpm", MLP + ["--precision", "bf16", "--mode", "low-precision-model"]),
    ("mlp fp16 lpm", MLP + ["--precision", "fp16", "--mode", "low-precision-model"]),
    ("mlp fp8 delayed", MLP + ALL_FP8 + ["--precision", "fp8", "--fp8-recipe", "delayed"]),
    ("mlp fp8 delayed e4m3", MLP + ALL_FP8 + ["--precision", "fp8", "--fp8-format", "e4m3", "--amax-history", "4"]),
    ("mlp fp8 current", MLP + ALL_FP8 + ["--precision", "fp8", "--fp8-recipe", "current"]),
    ("mlp fp8 block", MLP + ALL_FP8 + ["--precision", "fp8", "--fp8-recipe", "block"]),
    ("mlp mxfp8", MLP + ALL_FP8 + ["--precision", "mxfp8"]),
    ("mlp mxfp8 floor", MLP + ALL_FP8 + ["--precision", "mxfp8", "--mx-scale", "floor"]),
    ("mlp mxfp4", MLP + ALL_FP8 + ["--precision", "mxfp4"]),
    ("mlp mxfp6", MLP + ALL_FP8 + ["--precision", "mxfp6"]),
    ("mlp nvfp4", MLP + ALL_FP8 + ["--precision", "nvfp4"]),
    ("mlp nvfp4 none of the parts", MLP + ALL_FP8 + ["--precision", "nvfp4", "--nvfp4-no-rht", "--nvfp4-no-sr",
                                                    "--nvfp4-1d-weights"]),
    ("mlp nvfp4-torchao", MLP + ALL_FP8 + ["--precision", "nvfp4-torchao"]),
    ("mlp nvfp4-torchao none of the parts", MLP + ALL_FP8 + ["--precision", "nvfp4-torchao", "--nvfp4-no-rht", "--nvfp4-no-sr",
                                                            "--nvfp4-1d-weights"]),
    ("mlp fp8 --fp8-recipe mxfp8", MLP + ALL_FP8 + ["--precision", "fp8", "--fp8-recipe", "mxfp8"]),
    ("mlp adaptive", MLP + ["--precision", "adaptive", "--adaptive-every", "5", "--adaptive-warmup", "5"]),
    ("mlp plan delayed", MLP + ["--precision", "bf16", "--precision-plan", "@PLAN_DELAYED"]),
    ("mlp plan nvfp4", MLP + ["--precision", "bf16", "--precision-plan", "@PLAN_NVFP4"]),
    ("mlp plan nvfp4-torchao", MLP + ["--precision", "bf16", "--precision-plan", "@PLAN_NVFP4_TORCHAO"]),
    ("cnn fp32", CNN + ["--precision", "fp32"]),
    ("cnn bf16", CNN + ["--precision", "bf16"]),
    ("cnn fp16", CNN + ["--precision", "fp16"]),
    ("cnn bf16 lpm", CNN + ["--precision", "bf16", "--mode", "low-precision-model"]),
    ("gpt bf16", GPT + ["--precision", "bf16"]),
    ("gpt fp16", GPT + ["--precision", "fp16"]),
    ("gpt fp8", GPT + ["--precision", "fp8"]),
    ("gpt mxfp8", GPT + ["--precision", "mxfp8"]),
    ("gpt mxfp4", GPT + ["--precision", "mxfp4"]),
    ("gpt mxfp6", GPT + ["--precision", "mxfp6"]),
    ("gpt nvfp4", GPT + ["--precision", "nvfp4", "--fp8-first-last", "bf16"]),  # (1 block: nvfp4 keeps it in bf16)
    ("gpt nvfp4-torchao", GPT + ["--precision", "nvfp4-torchao"]),
]


def drop_timing(value):
    if isinstance(value, dict):
        return {k: drop_timing(v) for k, v in value.items() if k not in TIMING}
    return value


def checkpoint_digest(directory):
    """The tensors of the newest checkpoint: names, dtypes, shapes and bytes (not the metadata's times)."""
    files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    with open(os.path.join(directory, files[-1]), "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    h.update(data[8 + n:])
    return h.hexdigest()[:16]


def run(binary, name, flags, work):
    plans = {"@PLAN_DELAYED": PLAN_DELAYED, "@PLAN_NVFP4": PLAN_NVFP4, "@PLAN_NVFP4_TORCHAO": PLAN_NVFP4_TORCHAO}
    args = []
    for flag in flags:
        if flag in plans:
            path = os.path.join(work, flag[1:] + ".json")
            with open(path, "w") as f:
                json.dump(plans[flag], f)
            flag = path
        args.append(flag)
    metrics, checkpoints = os.path.join(work, "metrics.jsonl"), os.path.join(work, "ck")
    for leftover in [metrics]:
        if os.path.exists(leftover):
            os.remove(leftover)
    subprocess.run(["rm", "-rf", checkpoints], check=True)
    cmd = [binary, "train", "--steps", "15", "--threads", "2", "--metrics", metrics, "--checkpoint-dir", checkpoints] + args
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return f"{name}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}"
    steps = hashlib.sha256()
    with open(metrics) as f:
        for line in f:
            record = json.loads(line)
            if record.get("record") == "run":
                continue
            steps.update(json.dumps(drop_timing(record), sort_keys=True).encode())
    return f"{name}: steps {steps.hexdigest()[:16]} checkpoint {checkpoint_digest(checkpoints)}"


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/bin/mantissa"
    with tempfile.TemporaryDirectory() as work:
        for name, flags in CASES:
            print(run(binary, name, flags, work), flush=True)


if __name__ == "__main__":
    main()
