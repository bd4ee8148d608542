#!/usr/bin/env python3
"""Where a training step's time goes, mantissa and PyTorch side by side (issue 51): for each model and
precision, mantissa's own breakdown (`mantissa bench --model M --precision P --json`: the share of the step
in each kernel family, times its ms per step) next to PyTorch's profiler over the plain twin
(`plain_twin.py --profile N`: each op's self CPU time per step, grouped into the same families). One run
of each side per cell, in a fresh process, alternately; the same thread count, the same --cap for both.

  python3 bench/pytorch/breakdown.py --python .venv-torch/bin/python [--models gpt-small,gpt-wide,cnn]
      [--precisions fp32,bf16] [--steps 4] [--threads 2] [--cap avx2]

Prints a markdown table per model and precision: ms per step by family, and the difference (PyTorch -
mantissa; positive where mantissa is faster). The profiler adds its own cost to PyTorch's step (its
"profiled" total is above its timed one): read the families against each other, not the totals.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from compare import CAPS  # noqa: E402 (the same caps compare.py runs under)


def run_json(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def mantissa_families(cli, model, precision, steps, threads, env):
    j = run_json([cli, "bench", "--model", model, "--precision", precision, "--threads", str(threads), "--steps", str(steps),
                  "--warmup", "2", "--json"], env)
    run = j["runs"][0] if "runs" in j else j  # bf16: the autocast run first
    ms = run["ms_per_step"]
    return ms, {k: v * ms for k, v in run["time_fraction"].items()}


def torch_families(python, model, precision, steps, threads, env):
    j = run_json([python, os.path.join(HERE, "plain_twin.py"), "--model", model, "--precision", precision, "--threads",
                  str(threads), "--warmup", "2", "--profile", str(steps)], env)
    return j["profiled_ms_per_step"], j["families_ms"], j["top_ops_ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--python", required=True, help="a Python with torch (PyTorch 2.x)")
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "bin", "mantissa"))
    p.add_argument("--models", default="gpt-small,gpt-wide,cnn")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cap", choices=sorted(CAPS), default=None)
    args = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if args.cap:
        env.update(CAPS[args.cap])
    for model in args.models.split(","):
        for precision in args.precisions.split(","):
            m_ms, m = mantissa_families(args.cli, model, precision, args.steps, args.threads, env)
            t_ms, t, top = torch_families(args.python, model, precision, args.steps, args.threads, env)
            print(f"\n{model}, {precision}{' autocast' if precision == 'bf16' else ''}"
                  f"{', capped at ' + args.cap if args.cap else ''}: mantissa {m_ms:.1f} ms a step; "
                  f"PyTorch (plain twin, profiled) {t_ms:.1f} ms\n")
            print("| family | mantissa ms | PyTorch ms | PyTorch - mantissa |")
            print("|---|---|---|---|")
            families = sorted(set(m) | set(t), key=lambda f: -max(m.get(f, 0), t.get(f, 0)))
            for f in families:
                a, b = m.get(f, 0.0), t.get(f, 0.0)
                if max(a, b) >= 0.5:
                    print(f"| {f} | {a:.1f} | {b:.1f} | {b - a:+.1f} |")
            print("\nPyTorch's largest ops (self ms a step): " + ", ".join(f"{k} {v:.1f}" for k, v in list(top.items())[:8]))


if __name__ == "__main__":
    main()
