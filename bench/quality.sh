#!/usr/bin/env bash
# The quality experiment of issue 5, at small scale like the mixed-precision paper's tables: the
# Fashion-MNIST CNN and the fortunes GPT trained in fp32, bf16 and fp16 (dynamic loss scaling) with the
# same seed, steps and hyperparameters. Each run's JSON summary and log go to $OUT; docs/results.md
# records the numbers. Usage: bench/quality.sh [OUT]   (CNN_STEPS, GPT_STEPS override the lengths)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin/mantissa}
OUT=${1:-quality-results}
mkdir -p "$OUT"
for p in fp32 bf16 fp16; do
  "$BIN" train --model cnn --precision "$p" --steps "${CNN_STEPS:-1400}" --batch-size 128 --lr 3e-3 --warmup 100 \
    --eval-every 700 --seed 1 --json >"$OUT/cnn-$p.json" 2>"$OUT/cnn-$p.log"
done
for p in fp32 bf16 fp16; do
  "$BIN" train --model gpt --precision "$p" --steps "${GPT_STEPS:-1000}" --batch-size 16 --lr 1e-3 --warmup 100 \
    --eval-every 500 --eval-batches 20 --seed 1 --json >"$OUT/gpt-$p.json" 2>"$OUT/gpt-$p.log"
done
cat "$OUT"/*.json
