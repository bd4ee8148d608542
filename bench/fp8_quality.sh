#!/usr/bin/env bash
# The FP8 quality experiment of issue 14: the MLP on Fashion-MNIST and the fortunes GPT of
# docs/results.md trained in bf16 and in fp8 with each scaling recipe (same seed, steps and
# hyperparameters), and the GPT's loss curves in fp32, bf16 and fp8 side by side (`mantissa compare`).
# Each run's JSON summary and log go to $OUT; docs/results.md records the numbers.
# Usage: bench/fp8_quality.sh [OUT]   (MLP_STEPS, GPT_STEPS override the lengths)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin/mantissa}
OUT=${1:-fp8-quality-results}
mkdir -p "$OUT"
MLP="--model mlp --steps ${MLP_STEPS:-1400} --batch-size 128 --lr 1e-3 --warmup 100 --eval-every 700 --seed 1"
GPT="--model gpt --steps ${GPT_STEPS:-1000} --batch-size 16 --lr 1e-3 --warmup 100 --eval-every 500 --eval-batches 20 --seed 1"
"$BIN" train $MLP --precision bf16 --json >"$OUT/mlp-bf16.json" 2>"$OUT/mlp-bf16.log"
for r in delayed current block; do
  "$BIN" train $MLP --precision fp8 --fp8-recipe "$r" --json >"$OUT/mlp-fp8-$r.json" 2>"$OUT/mlp-fp8-$r.log"
  # Every layer in FP8, the first and last too.
  "$BIN" train $MLP --precision fp8 --fp8-recipe "$r" --fp8-first-last fp8 --json >"$OUT/mlp-fp8-all-$r.json" \
    2>"$OUT/mlp-fp8-all-$r.log"
done
# fp32, bf16 and fp8 (delayed, the default recipe) with their loss curves, then the other two recipes.
"$BIN" compare $GPT --precisions fp32,bf16,fp8 --plot "$OUT/gpt-fp8-compare.svg" --json \
  >"$OUT/gpt-compare.json" 2>"$OUT/gpt-compare.log"
for r in current block; do
  "$BIN" train $GPT --precision fp8 --fp8-recipe "$r" --json >"$OUT/gpt-fp8-$r.json" 2>"$OUT/gpt-fp8-$r.log"
done
cat "$OUT"/*.json
