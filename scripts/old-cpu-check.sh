#!/usr/bin/env bash
# Runs the library's test programs and the command on an emulated CPU older than AVX2 (QEMU's user-mode
# emulator with -cpu Nehalem: SSE4.2, no AVX), to show that mantissa picks its kernels from CPUID and
# never executes an instruction the CPU lacks. For humans and releases, not for CI (about 5 minutes).
#
#   scripts/old-cpu-check.sh [CPU_MODEL]      # default Nehalem; needs a build in build/ (make build)
set -euo pipefail
cd "$(dirname "$0")/.."
cpu=${1:-Nehalem}
if ! command -v qemu-x86_64 >/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "old-cpu-check: install qemu-user (as root) first" >&2; exit 1; }
  apt-get update -q && apt-get install -y -q qemu-user
fi
[ -x build/bin/mantissa ] || { echo "old-cpu-check: build first (make build)" >&2; exit 1; }
run() { echo "== qemu-x86_64 -cpu $cpu $*"; qemu-x86_64 -cpu "$cpu" "$@"; }
run build/bin/mantissa info | head -1
for t in unit_tests gradcheck_tests parity_tests training_tests; do
  run "build/bin/$t" --gtest_brief=1 | tail -1
done
run build/bin/mantissa train --model gpt --n-layer 1 --n-embd 32 --n-head 2 --block-size 16 --batch-size 4 \
  --steps 5 --eval-every 5 --eval-batches 1 --precision bf16
echo "== everything ran on an emulated $cpu"
