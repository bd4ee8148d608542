#!/usr/bin/env python3
"""mantissa against PyTorch, alternately in one session: for each model and precision, first a check
that both compute the same first-step loss from the same weights and batch (mantissa exports them,
bench.py loads them), then rounds of A B C A B C ... (a fresh process each, the same thread count), and
the median of each side and of the pairwise speed ratios. Two PyTorch twins: the matched one
(models.py through bench.py: mantissa's layers, F.scaled_dot_product_attention, fused AdamW) and the
plain one (plain_twin.py: the model as a PyTorch user writes it, plain attention with a mask, default
AdamW), timed in fp32 and bf16 autocast; docs/performance.md says what each differs in.

  python3 bench/pytorch/compare.py --python .venv-torch/bin/python [--models gpt-small,gpt-wide,cnn]
      [--rounds 3] [--steps 10] [--threads 2] [--cap avx2] [--pairs fp32,bf16-autocast] [--twins matched,plain]
      [--json out.json]

mantissa's fp32 runs against PyTorch fp32; mantissa's bf16 (autocast, and the low-precision model)
against torch.autocast('cpu', bfloat16). Ratios above 1 mean mantissa is faster. --cap avx2 runs both
sides as on an AVX2-only CPU: oneDNN capped for both (ONEDNN_MAX_CPU_ISA=AVX2), PyTorch's own kernels and
MKL capped too (ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2), mantissa's (MANTISSA_ISA=avx2).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Environment that makes both sides run as on a CPU with at most this instruction set.
CAPS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "MANTISSA_ISA": "avx2"},
}

# (label, mantissa flags, PyTorch precision)
PAIRS = [
    ("fp32", ["--precision", "fp32"], "fp32"),
    ("bf16 autocast", ["--precision", "bf16", "--mode", "autocast"], "bf16"),
    ("bf16 low-precision model", ["--precision", "bf16", "--mode", "low-precision-model"], "bf16"),
]


CAP = {}


def env_for(threads):
    env = dict(os.environ)
    env.update(CAP)
    # Neither side uses OpenBLAS (mantissa: oneDNN; PyTorch: MKL and oneDNN), but a set
    # OPENBLAS_CORETYPE can slow builds that do, so it is removed for both.
    env.pop("OPENBLAS_CORETYPE", None)
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_json(cmd, threads):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env_for(threads))
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--python", default=sys.executable, help="a Python with torch installed")
    a.add_argument("--mantissa", default=os.path.join(ROOT, "build", "bin", "mantissa"))
    a.add_argument("--models", default="gpt-small,gpt-wide,cnn")
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--steps", type=int, default=10)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--cap", choices=sorted(CAPS), help="run both sides as on a CPU with only this instruction set")
    a.add_argument("--pairs", default="fp32,bf16-autocast,bf16-low-precision-model",
                   help="which of fp32, bf16-autocast, bf16-low-precision-model to run")
    a.add_argument("--twins", default="matched,plain", help="which PyTorch twins: matched (models.py), plain (plain_twin.py)")
    a.add_argument("--json", help="write every measurement here")
    args = a.parse_args()
    if args.cap:
        CAP.update(CAPS[args.cap])
    wanted = args.pairs.split(",")
    pairs = [p for p in PAIRS if p[0].replace(" ", "-") in wanted]

    bench_py = os.path.join(HERE, "bench.py")
    plain_py = os.path.join(HERE, "plain_twin.py")
    twins = args.twins.split(",")
    common = ["--threads", str(args.threads), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    results = []
    torch_info = None
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for label, mflags, tprec in pairs:
                # Same thing computed: mantissa's initial weights and first batch, loaded by PyTorch.
                init = os.path.join(tmp, f"{model}-{tprec}.safetensors")
                m0 = run_json([args.mantissa, "bench", "--model", model, *mflags, "--steps", "1", "--warmup", "0",
                               "--threads", str(args.threads), "--export", init, "--json"], args.threads)
                t0 = run_json([args.python, bench_py, "--model", model, "--precision", tprec, "--init", init,
                               "--steps", "1", "--warmup", "0", "--threads", str(args.threads)], args.threads)
                torch_info = {k: t0[k] for k in ("torch", "mkldnn", "mkl", "fused_adamw")}
                row = {"model": model, "pair": label, "mantissa_ms": [], "pytorch_ms": [], "ratios": [],
                       "plain_ms": [], "plain_ratios": [],
                       "first_loss_mantissa": m0["first_loss"], "first_loss_pytorch": t0["first_loss"],
                       "first_loss_rel_diff": t0["first_loss_rel_diff"]}
                plain = "plain" in twins and model in ("gpt-small", "gpt-wide", "cnn") and label in ("fp32", "bf16 autocast")
                for r in range(args.rounds):
                    m = run_json([args.mantissa, "bench", "--model", model, *mflags, *common, "--json"], args.threads)
                    row["mantissa_ms"].append(m["ms_per_step"])
                    row["mantissa_peak_bytes"] = m["peak_bytes"]
                    line = f"{model:<10} {label:<25} round {r + 1}: mantissa {m['ms_per_step']:8.1f} ms"
                    if "matched" in twins:
                        t = run_json([args.python, bench_py, "--model", model, "--precision", tprec, *common], args.threads)
                        row["pytorch_ms"].append(t["ms_per_step"])
                        row["ratios"].append(t["ms_per_step"] / m["ms_per_step"])
                        line += f", matched twin {t['ms_per_step']:8.1f} ms ({row['ratios'][-1]:.2f}x)"
                    if plain:
                        u = run_json([args.python, plain_py, "--model", model, "--precision", tprec, *common], args.threads)
                        row["plain_ms"].append(u["ms_per_step"])
                        row["plain_ratios"].append(u["ms_per_step"] / m["ms_per_step"])
                        line += f", plain twin {u['ms_per_step']:8.1f} ms ({row['plain_ratios'][-1]:.2f}x)"
                    print(line, file=sys.stderr)
                results.append(row)

    print(f"\nPyTorch {torch_info['torch']} (oneDNN {torch_info['mkldnn']}, MKL {torch_info['mkl']}, "
          f"fused AdamW {torch_info['fused_adamw']}); {args.threads} threads, median of {args.steps} steps "
          f"after {args.warmup} warm-up, {args.rounds} alternating rounds"
          f"{', capped to ' + args.cap if args.cap else ''}\n")
    print(f"{'model':<10} {'mantissa':<25} {'mantissa ms':>12} {'matched ms':>11} {'speed-up':>9} "
          f"{'pairs (min-max)':>16} {'plain ms':>9} {'speed-up':>9} {'pairs (min-max)':>16} {'1st-loss diff':>14}")

    def cells(ms, ratios, width):
        if not ms:
            return f"{'-':>{width}} {'-':>9} {'-':>16}"
        return f"{statistics.median(ms):{width}.1f} {statistics.median(ratios):9.2f} {min(ratios):7.2f}-{max(ratios):<8.2f}"

    for row in results:
        print(f"{row['model']:<10} {row['pair']:<25} {statistics.median(row['mantissa_ms']):12.1f} "
              f"{cells(row['pytorch_ms'], row['ratios'], 11)} {cells(row['plain_ms'], row['plain_ratios'], 9)} "
              f"{row['first_loss_rel_diff']:14.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pytorch": torch_info, "threads": args.threads, "cap": args.cap, "steps": args.steps, "rounds": args.rounds,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
