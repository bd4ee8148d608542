#!/usr/bin/env python3
"""What scripts/gpu-check.sh prints from the JSON its runs leave: one line per run the moment it ends
(the headline first), and the tables at the end of each part. Plain Python 3, no packages: it runs on the
lent GPU machine and, for gpu-check's --dry-run, on sample results here.

  gpu_report.py line DIR NAME       one line for the run NAME (mantissa-bf16, pytorch-bf16, ...)
  gpu_report.py table DIR           mantissa against PyTorch per precision, and where mantissa's step goes
  gpu_report.py quality DIR         the char GPT's validation loss on the GPU against the CPU's fp32
  gpu_report.py kernels DIR NAME    every part of run NAME's step (by kernel, with MANTISSA_KERNEL_TIMES=kernel):
                                    ms per step, bytes, GB/s
  gpu_report.py against DIR NAME OTHER
                                    the parts of two runs' steps side by side, the largest differences first
                                    (the kernels part's default ways against its other ways)
"""
import json
import os
import sys

NAN = float("nan")
CPU_FP32_VAL_LOSS = 1.8870  # docs/results.md: the char GPT, 1000 steps, fp32 on the CPU


def load(d, name):
    """The last JSON line of DIR/NAME.json; for mantissa's bench, its one variant."""
    try:
        with open(os.path.join(d, name + ".json")) as f:
            j = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
    if "runs" in j and j["runs"]:
        run = dict(j["runs"][0])
        run.setdefault("copy_gbps", j.get("copy_gbps"))
        return run
    return j


def why_not(d, name):
    """The last line of the run's error output, for a run that left no result."""
    try:
        with open(os.path.join(d, name + ".err")) as f:
            lines = [l.strip() for l in f if l.strip()]
        return lines[-1] if lines else "no output"
    except OSError:
        return "not run"


def line(d, name):
    r = load(d, name)
    if r is None:
        return f"{name}: no result ({why_not(d, name)})"
    text = f"{name}: {r['ms_per_step']:.1f} ms/step, {r.get('items_per_second', NAN) / 1e3:.0f}k tokens/s"
    if "fraction_of_peak" in r:
        text += f", {r.get('model_gflops', NAN) / 1e3:.0f} TFLOP/s ({100 * r['fraction_of_peak']:.0f}% of its GEMM)"
    peak = r.get("peak_bytes")
    if isinstance(peak, dict):
        peak = peak.get("total")
    if peak:
        text += f", peak {peak / 2**30:.1f} GiB"
    traffic = r.get("host_device_per_step")
    if traffic:
        text += f", {traffic['waits']:.1f} host waits/step"
    if "fp8" in r.get("precision", "") and "fp8_tensor_core_products_per_step" in r:
        text += f", {r['fp8_tensor_core_products_per_step']:.0f} products/step on fp8 tensor cores"
    return text


def table(d):
    out = [f"{'precision':<10}{'mantissa ms':>12}{'PyTorch ms':>12}{'PT/mant':>8}{'tokens/s':>12}{'TFLOP/s':>9}"
           f"{'of GEMM':>9}{'peak GiB':>10}{'PT GiB':>8}{'waits':>7}"]
    for p in ["bf16", "fp16", "tf32", "fp32"]:
        m, t = load(d, "mantissa-" + p), load(d, "pytorch-" + p)
        if not m and not t:
            continue
        m, t = m or {}, t or {}
        ms, tms = m.get("ms_per_step", NAN), t.get("ms_per_step", NAN)
        waits = m.get("host_device_per_step", {}).get("waits", NAN)
        out.append(f"{p:<10}{ms:>12.1f}{tms:>12.1f}{tms / ms if ms == ms else NAN:>8.2f}{m.get('items_per_second', NAN):>12.0f}"
                   f"{m.get('model_gflops', NAN) / 1e3:>9.1f}{100 * m.get('fraction_of_peak', NAN):>8.0f}%"
                   f"{m.get('peak_bytes', {}).get('total', NAN) / 2**30:>10.1f}{t.get('peak_bytes', NAN) / 2**30:>8.1f}"
                   f"{waits:>7.1f}")
    c = load(d, "pytorch-bf16-compile")
    if c:
        out.append(f"PyTorch bf16 + torch.compile: {c['ms_per_step']:.1f} ms/step, {c.get('peak_bytes', 0) / 2**30:.1f} GiB")
    out.append("where mantissa's step goes on the GPU's clock (ms per step; 'gpu idle': waiting for the host):")
    for p in ["bf16", "fp16", "tf32", "fp32", "fp8"]:
        r = load(d, "mantissa-" + p)
        if not r or "time_fraction" not in r:
            continue
        parts = sorted(r["time_fraction"].items(), key=lambda kv: -kv[1])
        out.append(f"  {p}: " + ", ".join(f"{k} {v * r['ms_per_step']:.1f}" for k, v in parts[:12]))
        copy = r.get("copy_gbps")
        if copy and r.get("gbps"):
            rates = sorted(r["gbps"].items(), key=lambda kv: -r["time_fraction"].get(kv[0], 0))
            out.append(f"    without products, GB/s and % of the {copy:.0f} GB/s device copy: " +
                       ", ".join(f"{k} {v:.0f} ({100 * v / copy:.0f}%)" for k, v in rates))
    return "\n".join(out)


def kernels(d, name):
    r = load(d, name)
    if r is None or "time_fraction" not in r:
        return f"{name}: no breakdown ({why_not(d, name)})"
    ms, gbps, nbytes = r["ms_per_step"], r.get("gbps", {}), r.get("bytes_per_step", {})
    traffic = r.get("host_device_per_step", {})
    head = f"{name}: {ms:.1f} ms/step"
    if "wait_ms" in traffic:
        # Where the host waited for the GPU: in the step's own reads, and for the step's last kernels.
        head += (f"; the host waited {traffic['wait_ms']:.1f} ms in the step and {traffic['tail_ms']:.1f} ms"
                 f" for its last kernels")
    out = [head, f"  {'part':<32}{'ms':>7}{'GB/step':>9}{'GB/s':>7}"]
    for k, v in sorted(r["time_fraction"].items(), key=lambda kv: -kv[1]):
        out.append(f"  {k:<32}{v * ms:>7.2f}{nbytes.get(k, NAN) / 1e9:>9.2f}{gbps.get(k, NAN):>7.0f}")
    return "\n".join(out)


def against(d, name, other):
    a, b = load(d, name), load(d, other)
    if a is None or b is None or "time_fraction" not in a or "time_fraction" not in b:
        missing = name if a is None or "time_fraction" not in a else other
        return f"{name} against {other}: no breakdown of {missing} ({why_not(d, missing)})"
    ta = {k: v * a["ms_per_step"] for k, v in a["time_fraction"].items()}
    tb = {k: v * b["ms_per_step"] for k, v in b["time_fraction"].items()}
    out = [f"{name} {a['ms_per_step']:.1f} ms/step against {other} {b['ms_per_step']:.1f} ms/step "
           f"({a['ms_per_step'] - b['ms_per_step']:+.2f} ms)", f"  {'part':<32}{name[:10]:>11}{other[-10:]:>11}{'diff':>8}"]
    parts = sorted(set(ta) | set(tb), key=lambda k: -abs(ta.get(k, 0) - tb.get(k, 0)))
    for k in parts[:10]:
        out.append(f"  {k:<32}{ta.get(k, 0):>11.2f}{tb.get(k, 0):>11.2f}{ta.get(k, 0) - tb.get(k, 0):>+8.2f}")
    return "\n".join(out)


def quality(d):
    out = []
    for p in ["bf16", "fp16"]:
        r = load(d, "quality-" + p)
        if r is None or "final_val_loss" not in r:
            out.append(f"quality {p}: no result ({why_not(d, 'quality-' + p)})")
            continue
        v = r["final_val_loss"]
        out.append(f"quality {p}: validation loss {v:.4f} ({100 * (v / CPU_FP32_VAL_LOSS - 1):+.2f}% against the CPU's fp32 "
                   f"{CPU_FP32_VAL_LOSS}), {r.get('skipped_steps', 0)} skipped steps, {r.get('wall_seconds', NAN):.1f} s")
    return "\n".join(out)


def main(argv):
    if len(argv) >= 3 and argv[0] == "line":
        print(line(argv[1], argv[2]))
    elif len(argv) == 2 and argv[0] == "table":
        print(table(argv[1]))
    elif len(argv) == 3 and argv[0] == "kernels":
        print(kernels(argv[1], argv[2]))
    elif len(argv) == 4 and argv[0] == "against":
        print(against(argv[1], argv[2], argv[3]))
    elif len(argv) == 2 and argv[0] == "quality":
        print(quality(argv[1]))
    else:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
