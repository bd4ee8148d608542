#!/usr/bin/env python3
"""bf16 against fp32 on a CPU capped to an instruction set, over several runs: one training step's time
and peak memory, as ratios to fp32 measured in the same process, and their median and range across runs
(a single run's ratio moved between 1.1 and 1.5 on a shared 2-core VM), both of the median step and of the
fastest step of each run (the less noisy figure there).

  python3 bench/capped_ratios.py [--models gpt-small,cnn] [--runs 5] [--steps 10] [--cap avx2|none]

Each run is `mantissa bench --model M --precisions fp32,bf16 --mode autocast,low-precision-model --json`
with ONEDNN_MAX_CPU_ISA=AVX2 and MANTISSA_ISA=avx2 (oneDNN then has no bf16: the f32 fallbacks run).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPS = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "MANTISSA_ISA": "avx2"}, "none": {}}


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--mantissa", default=os.path.join(ROOT, "build", "bin", "mantissa"))
    a.add_argument("--models", default="gpt-small,cnn")
    a.add_argument("--runs", type=int, default=5)
    a.add_argument("--steps", type=int, default=10)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--cap", choices=sorted(CAPS), default="avx2")
    args = a.parse_args()
    env = dict(os.environ, **CAPS[args.cap])
    print(f"cap {args.cap}; {args.runs} runs of {args.steps} steps after {args.warmup} warm-up; ratios to fp32 "
          f"in the same run: median (min-max)")
    print(f"{'model':<10} {'variant':<26} {'ms/step':>8} {'time ratio':>20} {'fastest-step ratio':>20} "
          f"{'peak MiB':>9} {'memory ratio':>13}")
    for model in args.models.split(","):
        ratios, ms, peaks, fastest = {}, {}, {}, {}
        for r in range(args.runs):
            cmd = [args.mantissa, "bench", "--model", model, "--precisions", "fp32,bf16", "--mode",
                   "autocast,low-precision-model", "--steps", str(args.steps), "--warmup", str(args.warmup), "--json"]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if p.returncode != 0:
                sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr.strip()}")
            runs = json.loads(p.stdout)["runs"]
            base = next(x for x in runs if x["precision"] == "fp32")
            for x in runs:
                key = x["precision"] + ("" if x["precision"] == "fp32" else " " + x["mode"])
                ms.setdefault(key, []).append(x["ms_per_step"])
                ratios.setdefault(key, []).append(x["ms_per_step"] / base["ms_per_step"])
                fastest.setdefault(key, []).append(x["ms_min"] / base["ms_min"])
                peaks[key] = (x["peak_bytes"]["total"] / 2**20, x["peak_bytes"]["total"] / base["peak_bytes"]["total"])
            print(f"  {model} run {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in ratios.items()), file=sys.stderr)
        for key in ms:
            rs, fs = ratios[key], fastest[key]
            print(f"{model:<10} {key:<26} {statistics.median(ms[key]):8.1f} "
                  f"{statistics.median(rs):8.2f} ({min(rs):.2f}-{max(rs):.2f}) "
                  f"{statistics.median(fs):8.2f} ({min(fs):.2f}-{max(fs):.2f}) {peaks[key][0]:9.1f} {peaks[key][1]:13.2f}")


if __name__ == "__main__":
    main()
