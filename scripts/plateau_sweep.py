#!/usr/bin/env python3
"""The char GPT's unigram plateau, variant by variant (issue 50): trains `mantissa train --model gpt` for 150
steps at the default sizes on parts of Debian's license texts and of Python's sources, per seed and precision
variant, two runs at a time on one thread each, and prints the table of docs/results.md: the step at which
each run leaves the plateau (the mean loss of the 10 steps up to it below the text's byte entropy minus 0.1)
and its validation loss at step 150.

  python3 scripts/plateau_sweep.py build/bin/mantissa OUT_DIR            # runs what OUT_DIR lacks, prints the table
  python3 scripts/plateau_sweep.py build/bin/mantissa OUT_DIR --table    # the table of the runs OUT_DIR has

A run takes 6-16 minutes on a 2-core Zen 5 (fp32 the slowest); the whole set about 2 hours.
"""
import argparse
import collections
import glob
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

PART = 125000  # bytes of each text part


def texts():
    """Name -> bytes: three overlapping parts of the license texts (cat in glob order) and one of Python's."""
    licenses = b"".join(open(p, "rb").read() for p in sorted(glob.glob("/usr/share/common-licenses/*")))
    python = b"".join(open(p, "rb").read() for p in sorted(glob.glob("/usr/lib/python3*/json/*.py")))
    python += b"".join(open(p, "rb").read() for p in sorted(glob.glob("/usr/lib/python3*/argparse.py")))
    return {"licenses-a": licenses[:PART], "licenses-b": licenses[-PART:], "licenses-c": licenses[69999:69999 + PART],
            "python": python[:PART]}


# Variant name -> train flags beyond the common ones.
VARIANTS = {
    "fp32": ["--precision", "fp32"],
    "bf16": ["--precision", "bf16"],
    "fp16": ["--precision", "fp16"],
    "bf16, attention in f32": ["--precision", "bf16", "--fp32-ops", "attention"],
    "bf16, head in f32": ["--precision", "bf16", "--fp32-ops", "linear_cross_entropy"],
    "bf16, blocks' layers in f32": ["--precision", "bf16", "--fp32-layers", "blocks"],
    "bf16, warm-up 20": ["--precision", "bf16", "--warmup", "20"],
    "fp32, warm-up 20": ["--precision", "fp32", "--warmup", "20"],
}

# (text, seed) -> the variants run on it.
RUNS = {
    ("licenses-a", 1): ["bf16"],
    ("licenses-a", 2): ["bf16"],
    ("licenses-a", 3): ["fp32", "bf16", "bf16, attention in f32", "bf16, warm-up 20", "fp32, warm-up 20"],
    ("licenses-b", 1): ["fp32", "bf16", "bf16, attention in f32", "bf16, warm-up 20", "fp32, warm-up 20"],
    ("licenses-c", 1): ["fp32", "bf16", "fp16", "bf16, attention in f32", "bf16, head in f32", "bf16, blocks' layers in f32",
                        "bf16, warm-up 20", "fp32, warm-up 20"],
    ("python", 1): ["fp32", "bf16"],
}


def entropy(data):
    counts = collections.Counter(data)
    return -sum(c / len(data) * math.log(c / len(data)) for c in counts.values())


def run_name(text, seed, variant):
    return f"{text}.s{seed}.{variant.replace(', ', '.').replace(' ', '-').replace(chr(39), '')}"


def command(binary, path, seed, variant, metrics):
    return [binary, "train", "--model", "gpt", "--data", path, "--steps", "150", "--seed", str(seed), "--eval-every", "150",
            "--threads", "1", "--quiet", "--metrics", metrics] + VARIANTS[variant]


def escape_and_val(metrics, h):
    losses, escape, val = [], None, None
    for line in open(metrics):
        r = json.loads(line)
        if "val_loss" in r:
            val = r["val_loss"]
        elif "loss" in r and "step" in r:
            losses.append(r["loss"])
            if escape is None and len(losses) >= 10 and sum(losses[-10:]) / 10 < h - 0.1:
                escape = r["step"]
    return escape, val


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("out")
    ap.add_argument("--table", action="store_true", help="print the table of the runs OUT has; run nothing")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    parts = texts()
    for name, data in parts.items():
        with open(os.path.join(a.out, name + ".txt"), "wb") as f:
            f.write(data)
    jobs = []
    for (text, seed), variants in RUNS.items():
        for v in variants:
            metrics = os.path.join(a.out, run_name(text, seed, v) + ".jsonl")
            if not a.table and not os.path.exists(metrics):
                jobs.append(command(a.binary, os.path.join(a.out, text + ".txt"), seed, v, metrics))

    def run(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(" ".join(cmd), "failed:", r.stderr.strip(), file=sys.stderr)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run, jobs))
    print("| text (byte entropy) | seed | variant | leaves the plateau at step | validation loss at 150 |")
    print("|---|---|---|---|---|")
    for (text, seed), variants in RUNS.items():
        h = entropy(parts[text][:int(len(parts[text]) * 0.9)])
        for v in variants:
            metrics = os.path.join(a.out, run_name(text, seed, v) + ".jsonl")
            if not os.path.exists(metrics):
                continue
            escape, val = escape_and_val(metrics, h)
            print(f"| {text} ({h:.3f}) | {seed} | {v} | {escape if escape else 'not by 150'} | "
                  f"{'%.3f' % val if val is not None else '-'} |")


if __name__ == "__main__":
    main()
