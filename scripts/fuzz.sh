#!/usr/bin/env bash
# Runs every libFuzzer target of a `make fuzz` build, starting from the seed corpus in
# fuzz/corpus/<name>/, in one of two modes:
#   scripts/fuzz.sh BUILD_DIR check [TARGET...]      the check `make test` runs: a fixed seed and a fixed
#                                                    number of inputs per target, so a commit always gives
#                                                    the same result (no time limit decides what is tried)
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]    discovery (`make fuzz`): a fresh random seed, run for
#                                                    SECONDS; the seed is printed, to replay a run
# New inputs go to a scratch directory, never into the repository; a finding (crash, sanitizer report,
# broken invariant, an allocation over 512 MiB, an input slower than the timeout) is saved as
# BUILD/findings/<name>-* and fails the run: copy it into fuzz/corpus/<name>/ once fixed, so the replay
# tests keep trying it, and add a unit case.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/fuzz.sh BUILD_DIR check|SECONDS [TARGET...]"
build=${1:?$usage}
mode=${2:?$usage}
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx safetensors cast text)

# The check's inputs per target: about 8 s each on a 2-core Zen 4 VM under ASan, at each target's speed.
declare -A check_runs=([idx]=6000 [safetensors]=25000 [cast]=150000 [text]=25000)
readonly check_seed=20261205

# The check runs the same inputs on every run and every machine: libFuzzer's mutations follow the seed,
# and also what the target did with the inputs before (the bytes it compared, which go into its
# dictionary, and the coverage). So everything the target sees is made the same: one thread (OpenMP's
# threads would add coverage in a varying order), no address randomization and one environment (kernels
# take aligned or unaligned paths by address, and the environment's size moves the stack: 500 more bytes
# of it changed fuzz_cast's coverage), no reloading of the corpus on a timer, and a scratch directory
# with one path (the readers' messages quote it). One check at a time on a machine: the lock.
fixed_env=() no_aslr=()
if [ "$mode" = check ]; then
  # The timeout only has to catch a runaway: a slow machine must not turn a slow input into a finding.
  limits=(-seed=$check_seed -timeout=120 -reload=0)
  fixed_env=(env -i PATH=/usr/bin:/bin HOME=/tmp TMPDIR=/tmp LC_ALL=C OMP_NUM_THREADS=1)
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    no_aslr=(setarch "$(uname -m)" -R)
  else
    echo "fuzz: setarch -R is refused here, so addresses are random and runs may differ" >&2
  fi
  exec 9>/tmp/mantissa-fuzz-check.lock
  flock 9
elif [[ "$mode" =~ ^[0-9]+$ ]] && [ "$mode" -gt 0 ]; then
  limits=(-seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ') -max_total_time="$mode" -timeout=10)
else
  echo "$usage" >&2
  exit 2
fi

mkdir -p "$build/findings"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
for name in "${targets[@]}"; do
  if [ ! -x "$build/bin/fuzz_$name" ]; then
    echo "fuzz: no target '$name' in $build/bin (the targets: idx safetensors cast text)" >&2
    exit 2
  fi
  run=("${limits[@]}")
  [ "$mode" = check ] && run+=(-runs="${check_runs[$name]}")
  mkdir -p "$scratch/$name"
  log="$build/findings/$name.log"
  scratch_env=()
  if [ "$mode" = check ]; then
    scratch_env=(MANTISSA_FUZZ_SCRATCH=/tmp/mantissa-fuzz-check/$name)
    rm -rf "/tmp/mantissa-fuzz-check/$name"
  fi
  if "${fixed_env[@]}" "${scratch_env[@]}" "${no_aslr[@]}" "$build/bin/fuzz_$name" "$scratch/$name" "fuzz/corpus/$name" "${run[@]}" \
      -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
      -artifact_prefix="$build/findings/$name-" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    seed=$(sed -n 's/^INFO: Seed: *//p' "$log")
    echo "fuzz $name: seed $seed, $runs inputs, $cov, no finding"
  else
    echo "fuzz $name: FINDING (see $log and $build/findings/$name-*)" >&2
    grep -E 'Seed:|ERROR|invariant|runtime error|terminate' "$log" | head -6 >&2 || true
    status=1
  fi
done
exit $status
