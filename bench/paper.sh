#!/usr/bin/env bash
# The mixed-precision paper's experiments at small scale: `mantissa paper` trains the CNN, the GPT, the
# LSTM and the underflow-prone MLP in each configuration and writes the table (with the machine, the
# time taken and every cell's command) and the loss curves (the progress log goes to build/). Usage:
#   bench/paper.sh [--quick] [OUT_DIR]      (default OUT_DIR: docs; about an hour on 2 cores, --quick ~10 min)
# Extra flags for `mantissa paper` go in PAPER_FLAGS (e.g. PAPER_FLAGS="--models lstm").
set -euo pipefail
cd "$(dirname "$0")/.."
quick=()
if [[ "${1:-}" == "--quick" ]]; then
  quick=(--quick)
  shift
fi
out="${1:-docs}"
mkdir -p "$out"
name=paper${quick:+-quick}
make --no-print-directory build >/dev/null
# shellcheck disable=SC2086
build/bin/mantissa paper "${quick[@]}" ${PAPER_FLAGS:-} --out "$out/$name.md" --plot "$out/$name" 2> "build/$name.log"
