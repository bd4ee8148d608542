#!/usr/bin/env python3
"""Two builds of mantissa, A (before a change) and B (after), timed on the same training steps in turns
(A, B, A, B, ...) so that a shared machine's drift falls on both: the median step time of each precision
over every round, B's time as a ratio of A's (of the medians, and the median of the rounds' own ratios,
the steadier figure on a noisy machine), and each one's peak memory. For "no slowdown" checks of refactors.

  python3 bench/ab.py OLD_MANTISSA NEW_MANTISSA [--models gpt-small,cnn] [--precision fp32,bf16]
                      [--mode autocast,low-precision-model] [--rounds 5] [--steps 10]
"""
import argparse
import json
import statistics
import subprocess


def bench(binary, model, precision, mode, steps):
    out = subprocess.run([binary, "bench", "--model", model, "--precision", precision, "--mode", mode,
                          "--steps", str(steps), "--json"], check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    runs = j["runs"] if "runs" in j else [j]
    return {(r["precision"] + (" lpm" if r["mode"] == "low-precision-model" else "")): (r["ms_per_step"], r["peak_bytes"]["total"])
            for r in runs}


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("old")
    a.add_argument("new")
    a.add_argument("--models", default="gpt-small,cnn")
    a.add_argument("--precision", default="fp32,bf16")
    a.add_argument("--mode", default="autocast", help="autocast, low-precision-model, or both comma-separated")
    a.add_argument("--rounds", type=int, default=5)
    a.add_argument("--steps", type=int, default=10)
    args = a.parse_args()
    print(f"{args.rounds} rounds of A then B, each {args.steps} steps after warm-up; median ms/step over the rounds")
    print(f"{'model':<10} {'precision':<10} {'A ms':>8} {'B ms':>8} {'B/A':>6} {'paired':>7} {'A MiB':>8} {'B MiB':>8} "
          f"{'B/A per round':>30}")
    for model in args.models.split(","):
        times = {"A": {}, "B": {}}
        peak = {"A": {}, "B": {}}
        for _ in range(args.rounds):
            for name, binary in (("A", args.old), ("B", args.new)):
                for p, (ms, peak_bytes) in bench(binary, model, args.precision, args.mode, args.steps).items():
                    times[name].setdefault(p, []).append(ms)
                    peak[name][p] = peak_bytes / 2**20
        for p in times["A"]:
            a_ms, b_ms = statistics.median(times["A"][p]), statistics.median(times["B"][p])
            ratios = [b / a for a, b in zip(times["A"][p], times["B"][p])]
            per_round = " ".join(f"{r:.2f}" for r in ratios)
            print(f"{model:<10} {p:<10} {a_ms:>8.2f} {b_ms:>8.2f} {b_ms / a_ms:>6.3f} {statistics.median(ratios):>7.3f} "
                  f"{peak['A'][p]:>8.1f} {peak['B'][p]:>8.1f} {per_round:>30}")


if __name__ == "__main__":
    main()
