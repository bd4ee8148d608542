#!/usr/bin/env bash
# The device check of the CUDA backend, in one call on the lent GPU machine (under 8 minutes): what the
# machine is, the GPU test cases, the parity of every op on cuda against the reference backend (with a
# count of the ops whose kernels are not on the GPU yet), and GPT-2 124M training steps per precision in
# mantissa and, alternating, in the machine's PyTorch (bench/pytorch/bench.py): ms/step, tokens/s, model
# FLOP/s against mantissa's own product rate for an 8192^3 GEMM, peak memory, bf16 again with attention
# unfused (products and a softmax, not cuDNN's kernel), fp8 with its products on fp8 tensor cores and
# emulated, and where mantissa's step goes on the GPU's own clock; then the char GPT's quality trained
# on the GPU in bf16 and fp16. It runs what scripts/gpu-pack.sh built and carried (build-gpu/carry/),
# with the machine's own cuBLASLt (PyTorch's, or the toolkit's). Everything
# it prints also goes to $OUT/gpu-check.log when $OUT is set (the device tool brings it back).
set -uo pipefail
cd "$(dirname "$0")/.."
carry=${1:-build-gpu/carry}
log=${OUT:-/tmp}/gpu-check.log
exec > >(tee "$log") 2>&1
started=$(date +%s)
section() { printf '\n== %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
# The NVIDIA libraries mantissa loads with dlopen (cuBLASLt, cuDNN, NCCL; NVRTC for cuDNN's runtime-
# compiled engines): the loader's, else the toolkit's, else the ones in PyTorch's wheels (nvidia/*/lib).
site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
find_lib() {
  local found
  found=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  [ -z "$found" ] && found=$(ls /usr/local/cuda*/lib*/"$1" 2>/dev/null | head -1)
  [ -z "$found" ] && found=$(find $site /usr/local/lib /opt -name "$1" 2>/dev/null | head -1)
  echo "$found"
}
dirs=""
for lib in libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
  path=$(find_lib $lib)
  echo "$lib: ${path:-not found}"
  [ -n "$path" ] && dirs="$dirs:$(dirname "$path")"
done
# The carried libraries (oneDNN, ..., the fused-attention plugin), packed by gpu-pack.sh.
libs=/tmp/mantissa-carry-lib
rm -rf "$libs" && mkdir -p "$libs" && tar -C "$libs" --strip-components=1 -xJf "$carry/lib.tar.xz" || echo "cannot unpack $carry/lib.tar.xz"
export MANTISSA_SDPA_PLUGIN="$libs/libmantissa_cudnn_sdpa.so"
export LD_LIBRARY_PATH="$libs$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_WAIT_POLICY=passive
# The data sets where mantissa looks for them, from the carry when the machine lacks Debian's packages.
for d in /usr/share/games/fortunes /usr/share/datasets/fashion-mnist; do
  if [ ! -d "$d" ]; then
    mkdir -p "$d" && cp "$carry/data/$(basename "$d")"/* "$d"/ && echo "data: $d from the carry" ||
      echo "data: cannot create $d (the cases that read it will fail)"
  fi
done
"$carry/bin/mantissa" info | grep -E '^data parallel on GPUs'
"$carry/bin/mantissa" info | sed -n '/^cuda/,$p'

section "cuDNN's fused attention, alone first (a crash in it must not take the rest of the check with it)"
timeout 90 "$carry/bin/gpu_tests" --gtest_filter='*FusedAttention*' 2>&1 | tail -15
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "the fused attention case ended with status $status: the rest of the check runs with MANTISSA_ATTENTION=unfused"
  export MANTISSA_ATTENTION=unfused
fi

section "GPU test cases (tests/gpu/cuda_test.cpp, cuda_kernels_test.cpp, nccl_test.cpp)"
timeout 180 "$carry/bin/gpu_tests" --gtest_brief=1 2>&1 | tail -40

section "parity on cuda against the reference, every op and dtype (tests/parity/parity_test.cpp)"
timeout 240 "$carry/bin/parity_tests" --gtest_filter='*CudaBackendMatchesReference*' > /tmp/parity-cuda.txt 2>&1
echo "exit status: $? (a crash ends the run: the last case started is the last '[ RUN' line of parity-cuda.txt)"
echo "passed:  $(grep -c '^\[       OK \]' /tmp/parity-cuda.txt)"
echo "failed:  $(grep -c '^\[  FAILED  \].*Cuda.*(' /tmp/parity-cuda.txt)"
echo "skipped: $(grep -c '^\[  SKIPPED \].*(' /tmp/parity-cuda.txt)"
echo "kernels not on the GPU yet, by how many cases need them:"
grep -o '[a-z0-9_]*: no kernel for device cuda:0' /tmp/parity-cuda.txt | sort | uniq -c | sort -rn
grep -B2 -A12 '^\[  FAILED  \].*(' /tmp/parity-cuda.txt | grep -v '^\[ RUN' | head -80
cp /tmp/parity-cuda.txt "${OUT:-/tmp}/" 2>/dev/null

section "GPT-2 124M training steps: mantissa and PyTorch, alternating (batch 16 x 1024, AdamW)"
py=$(command -v python3 || true)
if [ -n "$py" ] && ! "$py" -c 'import torch' 2>/dev/null; then py=""; fi
[ -z "$py" ] && echo "no python with torch here: PyTorch's side is not timed"
results=${OUT:-/tmp}/gpt2-124m
mkdir -p "$results"
for p in fp32 tf32 bf16 fp16; do
  flags="--precision $p"
  case $p in tf32) flags="--precision fp32 --tf32" ;; esac
  timeout 100 "$carry/bin/mantissa" bench --model gpt2-124m --device cuda $flags --mode autocast --steps 5 --warmup 2 \
    --json > "$results/mantissa-$p.json" 2> "$results/mantissa-$p.err" || echo "mantissa $p: failed: $(tail -1 "$results/mantissa-$p.err")"
  if [ -n "$py" ]; then
    timeout 100 "$py" bench/pytorch/bench.py --model gpt2-124m --device cuda --precision "$p" --steps 5 --warmup 2 \
      > "$results/pytorch-$p.json" 2> "$results/pytorch-$p.err" || echo "pytorch $p: failed: $(tail -1 "$results/pytorch-$p.err")"
  fi
done
# bf16 once more with attention as products and a softmax instead of cuDNN's fused kernel.
MANTISSA_ATTENTION=unfused timeout 80 "$carry/bin/mantissa" bench --model gpt2-124m --device cuda --precision bf16 \
  --mode autocast --steps 5 --warmup 2 --json > "$results/mantissa-bf16-unfused.json" 2> "$results/mantissa-bf16-unfused.err" ||
  echo "mantissa bf16 unfused: failed: $(tail -1 "$results/mantissa-bf16-unfused.err")"
[ -n "$py" ] && timeout 150 "$py" bench/pytorch/bench.py --model gpt2-124m --device cuda --precision bf16 --compile --steps 5 \
  --warmup 3 > "$results/pytorch-bf16-compile.json" 2> "$results/pytorch-bf16-compile.err"
python3 - "$results" <<'PY'
import json, os, sys
d = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(d, name + ".json")) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception:
        return None
print(f"{'precision':<10}{'mantissa ms':>12}{'PyTorch ms':>12}{'ratio':>8}{'tokens/s':>12}{'TFLOP/s':>9}{'of GEMM':>9}{'peak GiB':>10}{'PyTorch GiB':>12}")
for p in ["fp32", "tf32", "bf16", "fp16"]:
    m, t = load("mantissa-" + p), load("pytorch-" + p)
    r = (m["results"][0] if "results" in m else m) if m else None  # one variant: a flat object
    ms = r["ms_per_step"] if r else float("nan")
    tms = t["ms_per_step"] if t else float("nan")
    print(f"{p:<10}{ms:>12.1f}{tms:>12.1f}{tms / ms:>8.2f}{(r or {}).get('items_per_second', float('nan')):>12.0f}"
          f"{(r or {}).get('model_gflops', float('nan')) / 1e3:>9.1f}{100 * (r or {}).get('fraction_of_peak', float('nan')):>8.0f}%"
          f"{(r or {}).get('peak_bytes', {}).get('total', float('nan')) / 2**30:>10.1f}{(t or {}).get('peak_bytes', float('nan')) / 2**30:>12.1f}")
    if r:
        print(f"{'':<10}mantissa's product rate for the shape: {r.get('peak_gflops', 0) / 1e3:.0f} TFLOP/s ({r.get('peak_instruction')})")
c = load("pytorch-bf16-compile")
if c:
    print(f"PyTorch bf16 + torch.compile: {c['ms_per_step']:.1f} ms/step, {c.get('peak_bytes', 0) / 2**30:.1f} GiB")
u = load("mantissa-bf16-unfused")
if u:
    print(f"mantissa bf16 with attention unfused (products and a softmax): {u['ms_per_step']:.1f} ms/step, "
          f"{u.get('peak_bytes', {}).get('total', 0) / 2**30:.1f} GiB")
print("where mantissa's step goes on the GPU's clock (ms per step; 'gpu idle': waiting for the host):")
for p in ["bf16", "fp16", "fp32", "bf16-unfused"]:
    m = load("mantissa-" + p)
    r = (m["results"][0] if "results" in m else m) if m else None
    if not r or "time_fraction" not in r:
        continue
    parts = sorted(r["time_fraction"].items(), key=lambda kv: -kv[1])
    print(f"  {p}: " + ", ".join(f"{k} {v * r['ms_per_step']:.1f}" for k, v in parts[:12]))
    copy = m.get("copy_gbps")
    if copy and "gbps" in r:
        rates = sorted(r["gbps"].items(), key=lambda kv: -r["time_fraction"].get(kv[0], 0))
        print(f"    without products, GB/s and % of the {copy:.0f} GB/s device copy: " +
              ", ".join(f"{k} {v:.0f} ({100 * v / copy:.0f}%)" for k, v in rates))
PY
section "quality: the char GPT of docs/results.md trained on the GPU (target: within 1% of the CPU's fp32 1.8870)"
for p in bf16 fp16; do
  timeout 120 "$carry/bin/mantissa" train --model gpt --device cuda --precision $p --steps 1000 --batch-size 16 --lr 1e-3 \
    --warmup 100 --eval-every 1000 --eval-batches 20 --seed 1 --json > "$results/quality-$p.json" 2> "$results/quality-$p.err" ||
    echo "quality $p: failed: $(tail -1 "$results/quality-$p.err")"
done
python3 - "$results" <<'PY'
import json, os, sys
for p in ["bf16", "fp16"]:
    try:
        with open(os.path.join(sys.argv[1], f"quality-{p}.json")) as f:
            r = json.loads(f.read().strip().splitlines()[-1])
        v = r["final_val_loss"]
        print(f"{p}: validation loss {v:.4f} ({100 * (v / 1.8870 - 1):+.2f}% against the CPU's fp32), "
              f"{r.get('skipped_steps', 0)} skipped steps, {r.get('wall_seconds', float('nan')):.1f} s")
    except Exception as e:
        print(f"{p}: no result ({e})")
PY

section "fp8 (last: the first part a tight time budget cuts)"
# FP8 (delayed scaling, e4m3 forward and e5m2 gradients): products on fp8 tensor cores, then emulated
# (the same fp8 values multiplied as bf16), for the speed the fp8 kernels give.
timeout 80 "$carry/bin/mantissa" bench --model gpt2-124m --device cuda --precision fp8 --fp8-recipe delayed \
  --mode autocast --steps 5 --warmup 2 --json > "$results/mantissa-fp8.json" 2> "$results/mantissa-fp8.err" ||
  echo "mantissa fp8: failed: $(tail -1 "$results/mantissa-fp8.err")"
MANTISSA_FP8_PRODUCTS=emulated timeout 80 "$carry/bin/mantissa" bench --model gpt2-124m --device cuda --precision fp8 \
  --fp8-recipe delayed --mode autocast --steps 5 --warmup 2 --json > "$results/mantissa-fp8-emulated.json" \
  2> "$results/mantissa-fp8-emulated.err" || echo "mantissa fp8 emulated: failed: $(tail -1 "$results/mantissa-fp8-emulated.err")"
python3 - "$results" <<'PY'
import json, os, sys
def load(name):
    try:
        with open(os.path.join(sys.argv[1], name + ".json")) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception:
        return None
for name, what in [("fp8", "on fp8 tensor cores"), ("fp8-emulated", "emulated as bf16 products")]:
    f = load("mantissa-" + name)
    r = (f["results"][0] if "results" in f else f) if f else None
    if r:
        print(f"mantissa fp8 (delayed) {what}: {r['ms_per_step']:.1f} ms/step, "
              f"{r.get('peak_bytes', {}).get('total', 0) / 2**30:.1f} GiB")
m = load("mantissa-fp8")
r = (m["results"][0] if "results" in m else m) if m else None
if r and "time_fraction" in r:
    parts = sorted(r["time_fraction"].items(), key=lambda kv: -kv[1])
    print("  fp8 on the GPU's clock: " + ", ".join(f"{k} {v * r['ms_per_step']:.1f}" for k, v in parts[:12]))
PY

section "done"
