#!/usr/bin/env bash
# Runs every libFuzzer target of a `make fuzz` build for SECONDS each (default 10), starting from the
# seed corpus in fuzz/corpus/<name>/. New inputs go to a scratch directory, never into the repository;
# a finding (crash, sanitizer report, broken invariant, an allocation over 512 MiB, an input slower than
# 10 s) is saved as BUILD/findings/<name>-* and fails the run: copy it into fuzz/corpus/<name>/ once
# fixed, so the replay tests keep trying it.
#   scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]}
seconds=${2:-10}
shift $(($# < 2 ? $# : 2))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx safetensors cast text)

mkdir -p "$build/findings"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
for name in "${targets[@]}"; do
  mkdir -p "$scratch/$name"
  log="$build/findings/$name.log"
  if "$build/bin/fuzz_$name" "$scratch/$name" "fuzz/corpus/$name" -max_total_time="$seconds" \
      -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$build/findings/$name-" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz $name: ${seconds}s, $runs inputs, $cov, no finding"
  else
    echo "fuzz $name: FINDING (see $log and $build/findings/$name-*)" >&2
    grep -E 'ERROR|invariant|runtime error|terminate' "$log" | head -5 >&2 || true
    status=1
  fi
done
exit $status
