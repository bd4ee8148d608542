#!/usr/bin/env bash
# The hostile-input probe (issues 33 and 54): what a new user, or an attacker with write access to a shared
# directory, hands mantissa, in the seven families of the one-mechanism-each design: files to read, files
# to write, numbers, settings that contradict each other or do nothing, checkpoints, data-parallel
# ranks, telemetry. Each case runs the command with a time limit and checks what a careful user expects:
# the exit status (2 for a refusal), one line on standard error, no signal or sanitizer report, no run
# past the limit, and the user's files (a planted link's target, a checkpoint, a metrics file) left as
# they were. Prints each failure and then `N passed, N failed`; exits 1 if any failed.
#
#   scripts/hostile-inputs.sh [--bin DIR]     (DIR holds mantissa; default build/bin)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/bin"
[ "${1:-}" = "--bin" ] && bin=$2
m="$bin/mantissa"
[ -x "$m" ] || { echo "hostile-inputs: no $m (build first)" >&2; exit 2; }
work=$(mktemp -d /tmp/mantissa-hostile.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
passed=0 failed=0

# A file whose contents must survive every case: a planted link points at it.
victim="$work/victim"
printf 'the user'"'"'s data\n' >"$victim"

# expect STATUS LIMIT NAME -- COMMAND...: runs COMMAND (stdin from /dev/null) for at most LIMIT seconds.
# STATUS 2: a refusal of one line; 0: success; mpi: a refusal under mpiexec (any failing status, and
# mpiexec's own lines besides ours). The victim must be unchanged.
expect() {
  local want=$1 limit=$2 name=$3
  shift 4
  local err="$work/err" status
  timeout -s KILL "$limit" "$@" </dev/null >/dev/null 2>"$err"
  status=$?
  local why=""
  if [ "$status" = 137 ]; then why="ran past ${limit}s"
  elif [ "$status" -gt 128 ]; then why="killed by signal $((status - 128))"
  elif grep -q "Sanitizer\|runtime error:" "$err"; then why="sanitizer report"
  elif [ "$want" = mpi ] && [ "$status" = 0 ]; then why="accepted"
  elif [ "$want" != mpi ] && [ "$status" != "$want" ]; then why="exit status $status, not $want"
  elif [ "$want" = 2 ] && [ "$(grep -c '' "$err")" != 1 ]; then why="$(grep -c '' "$err") lines on standard error, not 1"
  elif [ "$(cat "$victim")" != "the user's data" ]; then why="the victim file changed"
  fi
  if [ -z "$why" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL [$name]: $why: $*" >&2
    head -c 300 "$err" | sed 's/^/    /' >&2
    printf 'the user'"'"'s data\n' >"$victim"
  fi
}
# says TEXT: the last case's standard error holds TEXT (a refusal that says what is wrong).
says() {
  if grep -qF -- "$1" "$work/err"; then return; fi
  passed=$((passed - 1)) failed=$((failed + 1))
  echo "FAIL [message]: standard error lacks '$1': $(head -c 200 "$work/err")" >&2
}

quick=(--model mlp --hidden 16 --steps 2 --eval-every 2 --batch-size 32)
gpt=(--model gpt --n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --batch-size 4 --steps 2 --eval-every 2 --eval-batches 1)

# ---- 1. Reading a file: special files, links to them, huge, empty, torn, for every reader ----------
mkfifo "$work/fifo"
ln -s "$work/fifo" "$work/link-to-fifo"
ln -s /dev/zero "$work/link-to-zero"
mkdir -p "$work/empty-dir" "$work/huge-dir" "$work/gz-dir"
truncate -s 700M "$work/huge-dir/a.txt" "$work/huge-dir/b.txt"
truncate -s 2G "$work/huge.txt"
: >"$work/empty.txt"
printf 'short' >"$work/short.txt"
head -c 5000 /dev/urandom | gzip >"$work/gz-dir/a.txt.gz"
for bad in "$work/fifo" "$work/link-to-fifo" /dev/zero "$work/link-to-zero" /dev/null /proc/self/mem "$work/empty-dir" \
           "$work/huge-dir" "$work/huge.txt" "$work/empty.txt" "$work/short.txt" "$work/missing"; do
  expect 2 10 read-text -- "$m" train "${gpt[@]}" --data "$bad"
  expect 2 10 read-lstm -- "$m" train --model lstm --steps 1 --data "$bad"
  expect 2 10 read-images -- "$m" train "${quick[@]}" --data "$bad"
  expect 2 10 read-plan -- "$m" train "${quick[@]}" --precision bf16 --precision-plan "$bad"
  expect 2 10 read-telemetry -- "$m" inspect "$bad"
done
# Image sets: torn, wrong magic, gzip garbage, labels that do not match, an IDX header claiming 16 GiB.
idx() {  # idx FILE MAGIC3 DIMS... : an IDX header (type byte 0x08) and the bytes given on stdin
  local f=$1 n=$2
  shift 2
  { printf '\0\0\x08'"$(printf '\\x%02x' "$n")"; for d in "$@"; do printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((d >> 24 & 255)) $((d >> 16 & 255)) $((d >> 8 & 255)) $((d & 255)))"; done; cat; } >"$f"
}
imageset() {  # imageset DIR N: N images of 8x8 and N labels (0..2)
  mkdir -p "$1"
  for split in train t10k; do
    head -c $(($2 * 64)) /dev/urandom | idx "$1/$split-images-idx3-ubyte" 3 "$2" 8 8
    python3 -c "import sys; sys.stdout.buffer.write(bytes(i % 3 for i in range($2)))" | idx "$1/$split-labels-idx1-ubyte" 1 "$2"
  done
}
imageset "$work/img-ok" 100
expect 0 60 read-images-ok -- "$m" train --model mlp --hidden 16 --steps 2 --eval-every 2 --batch-size 32 --data "$work/img-ok"
for variant in torn magic gzip labels huge dims zero; do
  d="$work/img-$variant"
  cp -r "$work/img-ok" "$d"
  case $variant in
    torn) head -c 1000 "$work/img-ok/train-images-idx3-ubyte" >"$d/train-images-idx3-ubyte" ;;
    magic) printf '\x01\x02\x03\x04' | dd of="$d/train-images-idx3-ubyte" conv=notrunc 2>/dev/null ;;
    gzip) rm "$d/train-images-idx3-ubyte"; head -c 999 /dev/urandom >"$d/train-images-idx3-ubyte.gz" ;;
    labels) head -c 50 /dev/zero | idx "$d/train-labels-idx1-ubyte" 1 50 ;;
    huge) head -c 64 /dev/urandom | idx "$d/train-images-idx3-ubyte" 3 65536 256 256 ;;
    dims) head -c 6400 /dev/urandom | idx "$d/train-images-idx3-ubyte" 2 100 64 ;;
    zero) : | idx "$d/train-images-idx3-ubyte" 3 0 8 8 ;;
  esac
  expect 2 10 "read-images-$variant" -- "$m" train --model mlp --hidden 16 --steps 2 --data "$d"
  expect 2 10 "read-images-$variant-cnn" -- "$m" train --model cnn --width 4 --steps 2 --data "$d"
done
# Text that is compressed or binary (gzip bytes), and safetensors where a checkpoint should be.
for bad in "$work/fifo" /dev/zero "$work/empty.txt" "$work/short.txt" "$victim" "$work/empty-dir"; do
  mkdir -p "$work/ck-special"
  rm -f "$work/ck-special/ckpt-00000001.safetensors"
  ln -s "$bad" "$work/ck-special/ckpt-00000001.safetensors"
  expect 2 10 read-checkpoint -- "$m" train "${quick[@]}" --steps 3 --checkpoint-dir "$work/ck-special" --resume
done
printf '1.5\n%.0s' {1..10} >"$work/values"
head -c 100000 /dev/zero | tr '\0' '1' >"$work/long-line"
expect 2 10 cast-long-line -- sh -c "'$m' cast --to bf16 <'$work/long-line'"
expect 2 10 cast-zero -- sh -c "'$m' cast --to bf16 </dev/zero"
expect 0 10 cast-ok -- sh -c "'$m' cast --to bf16 <'$work/values'"

# ---- 2. Writing a file: every output flag, at special files, links, bad paths -------------------
ln -s "$victim" "$work/link-to-victim"
mkdir -p "$work/readonly"
for target in '' "$work/empty-dir" "$work/fifo" /dev/null /dev/full "$work/link-to-victim" "$victim/under" \
              "$work/missing-dir/x" /proc/x "$work/link-to-fifo"; do
  expect 2 10 write-metrics -- "$m" train "${quick[@]}" --metrics "$target"
  expect 2 10 write-telemetry -- "$m" train "${quick[@]}" --telemetry "$target"
  expect 2 10 write-plan-out -- "$m" train "${quick[@]}" --precision adaptive --plan-out "$target"
  expect 2 10 write-compare-plot -- "$m" compare "${quick[@]}" --precisions fp32 --plot "$target"
  expect 2 10 write-inspect-plot -- "$m" inspect "$work/missing.jsonl" --plot "$target"
  expect 2 10 write-export -- "$m" bench --model gpt-small --steps 1 --warmup 0 --export "$target"
  expect 2 10 write-paper-out -- "$m" paper --models nosuch --out "$target"
done
# A checkpoint directory where a file is, under a file, where none can be made.
for target in '' "$victim" "$victim/under" /proc/x "$work/fifo" /dev/null "$work/link-to-victim" "$work/link-to-fifo"; do
  expect 2 10 write-checkpoint-dir -- "$m" train "${quick[@]}" --checkpoint-dir "$target"
  expect 2 10 write-compare-checkpoint-dir -- "$m" compare "${quick[@]}" --precisions fp32 --checkpoint-dir "$target"
done
# Links planted at the names a writer might use for its temporary: never followed.
for out in plot.svg m.jsonl t.jsonl plan.json export.safetensors; do
  rm -rf "$work/out"; mkdir -p "$work/out"
  for planted in "$out.partial" "$out.tmp" "$out~" ".$out.swp"; do ln -s "$victim" "$work/out/$planted"; done
  case $out in
    plot.svg) expect 0 60 planted-$out -- "$m" compare "${quick[@]}" --precisions fp32 --plot "$work/out/$out" ;;
    m.jsonl) expect 0 60 planted-$out -- "$m" train "${quick[@]}" --metrics "$work/out/$out" ;;
    t.jsonl) expect 0 60 planted-$out -- "$m" train "${quick[@]}" --telemetry "$work/out/$out" ;;
    plan.json) expect 0 60 planted-$out -- "$m" train "${quick[@]}" --precision adaptive --plan-out "$work/out/$out" ;;
    export.safetensors) expect 0 60 planted-$out -- "$m" bench --model gpt-small --batch-size 2 --steps 1 --warmup 0 \
                          --precision fp32 --mode autocast --export "$work/out/$out" ;;
  esac
done
rm -rf "$work/ck"; mkdir -p "$work/ck"
for planted in ckpt-00000002.safetensors.partial ckpt-00000002.safetensors.tmp; do ln -s "$victim" "$work/ck/$planted"; done
expect 0 60 planted-checkpoint -- "$m" train "${quick[@]}" --checkpoint-dir "$work/ck"
# Appends through a link only when asked.
: >"$work/asked"
ln -s "$work/asked" "$work/link-to-asked"
expect 2 10 metrics-link -- "$m" train "${quick[@]}" --metrics "$work/link-to-asked"
expect 0 60 metrics-follow-asked -- "$m" train "${quick[@]}" --metrics "$work/link-to-asked" --follow-symlinks
[ -s "$work/asked" ] || { echo "FAIL [metrics-follow-asked]: nothing appended" >&2; failed=$((failed + 1)); }

# ---- 3. Numbers: every numeric flag of every command, given what is not a decimal in range ---------
for command in train compare paper inspect "bench" "bench matmul" "bench mlp" cast formats info; do
  # shellcheck disable=SC2086
  $m $command --help | awk '/^  --/ { split($2, t, /[=:]/); if (t[1] == "INT" || t[1] == "UINT" || t[1] == "FLOAT") print $1, t[1] }' |
  while read -r flag type; do
    values=(0x10 5abc '' 1e999 ' 7')
    [ "$type" = FLOAT ] && values+=(nan inf 0x1p-3) || values+=(1.5 99999999999999999999999)
    [ "$type" = UINT ] && values+=(-1)
    for v in "${values[@]}"; do echo "$command|$flag|$v"; done
  done
done >"$work/number-cases"
while IFS='|' read -r command flag v; do
  extra=()
  [ "$command" = inspect ] && extra=("$work/missing.jsonl")
  [ "$command" = cast ] && extra=(--to bf16)
  # shellcheck disable=SC2086
  expect 2 10 "number $command $flag '$v'" -- "$m" $command "${extra[@]}" "$flag" "$v"
done <"$work/number-cases"
# Values finite but meaningless.
for args in "--lr 0" "--lr -1" "--precision fp16 --min-scale 1e-300" "--precision fp16 --init-scale 1e39" "--weight-decay -0.1" "--loss-weight 0" "--momentum 1" "--clip -1" "--threads 100000" \
            "--batch-size -5" "--hidden -1" "--steps 0" "--precision fp16 --backoff-factor 1" "--precision fp16 --growth-factor 1" \
            "--precision fp16 --init-scale 1e-300" "--loss-scale static:1e-300" "--loss-scale static:0" "--seed -1" \
            "--lr 1e300" "--lr 11" "--weight-decay 1e300" "--weight-decay 2" "--loss-weight 1e300" "--loss-weight 1e-300" \
            "--clip 1e300" "--precision fp16 --backoff-factor 1e-300" "--precision fp16 --growth-factor 1e300" \
            "--checkpoint-minutes 1e300" "--bucket-mb 1e300" "--dist-timeout 1e300" "--normalize 0.5,1e-300" \
            "--normalize 1e300,0.5"; do
  # shellcheck disable=SC2086
  expect 2 10 "meaningless $args" -- "$m" train --model mlp $args
done
for command in "bench --model gpt-small" "bench matmul" "bench mlp" "train --model mlp" "compare --model mlp"; do
  for t in 100000 -3 5000; do
    # shellcheck disable=SC2086
    expect 2 10 "threads $command $t" -- "$m" $command --threads $t
  done
done
# Thread counts within the documented bound, where the address space cannot hold their stacks: refused,
# naming the cap (OpenMP aborted the process before).
for command in "train --model mlp --steps 1" "bench matmul" "bench mlp"; do
  # shellcheck disable=SC2086
  expect 2 20 "threads under ulimit -v $command" -- prlimit --as=8589934592 "$m" $command --threads 4096
  says "at most"
done
expect 2 20 "threads under ulimit -v OMP_NUM_THREADS" -- env OMP_NUM_THREADS=4096 prlimit --as=8589934592 "$m" train --model mlp --steps 1
says "OMP_NUM_THREADS"
expect 2 10 "isa cap naming none" -- env MANTISSA_ISA=avx3 "$m" train --model mlp --steps 1
says "MANTISSA_ISA"
# Empty texts where a value is expected: never taken as the default.
for args in "train --data" "train --loss-scale" "train --precision" "train --model" "train --fp32-layers" "train --metrics" \
            "compare --precisions" "paper --quick --models" "paper --suite" "bench --model gpt-small --precisions" \
            "cast --to" "export $work/none.safetensors --to pytorch"; do
  # shellcheck disable=SC2086
  expect 2 10 "empty $args" -- "$m" $args ''
  says "empty"
done
for flag in --n-layer --n-head --n-embd --block-size --batch-size --width; do
  for v in 0 -1; do expect 2 10 "bench size $flag $v" -- "$m" bench --model gpt-small "$flag" "$v"; done
done

# ---- 4. Settings that contradict each other or do nothing -------------------------------------------
imageset "$work/one-class" 100
python3 -c "import sys; sys.stdout.buffer.write(bytes(100))" | idx "$work/one-class/train-labels-idx1-ubyte" 1 100
for args in "--steps 5 --epochs 2" "--steps 5 --inject-nonfinite 9" "--steps 5 --warmup 10" "--data $work/img-ok --batch-size 500" \
            "--data $work/one-class" "--precision fp16 --init-scale 8 --min-scale 16" "--fp8-recipe current" "--amax-history 4" \
            "--adaptive-every 10" "--init-scale 1024" "--precision fp16 --loss-scale deepspeed --hysteresis 4" \
            "--momentum 0.5" "--precision bf16 --stochastic-rounding" "--checkpoint-every 2" "--keep 1" "--resume-allow lr" \
            "--n-layer 2" "--width 16" "--bptt 4" "--grad-reduce bf16" "--checksum-every 10" "--overlap off" "--resume"; do
  # shellcheck disable=SC2086
  expect 2 10 "contradiction $args" -- "$m" train --model mlp --steps 5 $args
done
expect 2 10 compare-twice -- "$m" compare --model mlp --steps 5 --precisions fp32,bf16,fp32
expect 2 10 compare-bad -- "$m" compare --model mlp --steps 5 --precisions fp32,fp7
expect 0 60 named-eval-every -- "$m" train --model mlp --hidden 16 --steps 2 --batch-size 32 --eval-every 50
says "note: --eval-every 50 is past the run's last step (2)"

# ---- 5. Checkpoints: damaged bytes and damaged meaning; another run's directory --------------------
editor="python3 $root/tests/io/edit_checkpoint.py"
good="$work/good"
expect 0 60 checkpoint-good -- "$m" train --model mlp --hidden 16 --precision bf16 --mode low-precision-model --steps 10 \
  --eval-every 10 --checkpoint-dir "$good"
file=ckpt-00000010.safetensors
scaler() { echo "{\"floor_overflows\":0,\"growth_tracker\":$4,\"hysteresis_left\":$5,\"scale\":\"$1\",\"skipped\":$2,\"steps\":$3}"; }
while IFS='|' read -r edit; do
  rm -rf "$work/bad"; mkdir -p "$work/bad"
  eval "$editor '$good/$file' '$work/bad/$file' $edit" || { echo "FAIL [checkpoint edit]: $edit" >&2; failed=$((failed + 1)); continue; }
  sum=$(md5sum <"$work/bad/$file")
  expect 2 10 "checkpoint $edit" -- "$m" train --model mlp --hidden 16 --precision bf16 --mode low-precision-model --steps 20 \
    --eval-every 20 --checkpoint-dir "$work/bad" --resume
  [ "$(md5sum <"$work/bad/$file")" = "$sum" ] || { echo "FAIL [checkpoint kept]: $edit" >&2; failed=$((failed + 1)); }
done <<EOF
drop-prefix optim/
drop-prefix optim/m.
drop-prefix model/
retype optim/m.0 BF16
set-meta step -995
set-meta step 1e3
set-meta step 0
set-meta step 99999999999999999999
set-meta optim_step 7
set-meta optim_step -1
set-meta data_position 99999999
set-meta data_position -1
set-meta config '{}'
set-meta config 'not json'
set-meta fp8 delayed
set-meta loss_scaler 'not json'
set-meta loss_scaler '$(scaler 1e39 0 10 0 1)'
set-meta loss_scaler '$(scaler 0 0 10 0 1)'
set-meta loss_scaler '$(scaler 1e-300 0 10 0 1)'
set-meta loss_scaler '$(scaler 1e-40 0 10 0 1)'
set-meta loss_scaler '$(scaler -4 0 10 0 1)'
set-meta loss_scaler '$(scaler nan 0 10 0 1)'
set-meta loss_scaler '$(scaler 1 11 10 0 1)'
set-meta loss_scaler '$(scaler 1 -1 10 0 1)'
set-meta loss_scaler '$(scaler 1 0 10 -5 1)'
set-meta loss_scaler '$(scaler 1 0 10 0 0)'
set-meta loss_scaler '$(scaler 1 0 9 0 1)'
nan model/fc0.weight
nan optim/master.0
nan optim/v.0
set-first optim/v.0 -1
set-first optim/v.1 -0.5
set-first optim/m.0 inf
EOF
# Torn: every length cut from the file.
for cut in 0 4 8 9 100 1000 -1000 -8 -1; do
  rm -rf "$work/bad"; mkdir -p "$work/bad"
  size=$(stat -c %s "$good/$file")
  [ "$cut" -lt 0 ] && keep=$((size + cut)) || keep=$cut
  head -c "$keep" "$good/$file" >"$work/bad/$file"
  expect 2 10 "checkpoint torn at $keep" -- "$m" train --model mlp --hidden 16 --precision bf16 --mode low-precision-model \
    --steps 20 --checkpoint-dir "$work/bad" --resume
done
# Another run's directory: a fresh run refuses it and leaves its checkpoints.
expect 2 10 checkpoint-other-run -- "$m" train --model mlp --hidden 16 --precision bf16 --mode low-precision-model --steps 10 \
  --eval-every 10 --checkpoint-dir "$good"
[ -f "$good/$file" ] || { echo "FAIL [checkpoint other run]: pruned" >&2; failed=$((failed + 1)); }
expect 2 10 checkpoint-past-steps -- "$m" train --model mlp --hidden 16 --precision bf16 --mode low-precision-model --steps 5 \
  --checkpoint-dir "$good" --resume

# ---- 6. Data-parallel ranks that differ ----------------------------------------------------------
if command -v mpiexec >/dev/null; then
  mlp=(train --model mlp --steps 4 --eval-every 4 --batch-size 64 --threads 1)
  for pair in "--hidden 64|--hidden 32" "--lr 1e-3|--lr 2e-3" "--seed 1|--seed 2" "--precision bf16|--precision fp16" \
              "--optimizer adamw|--optimizer sgd" "--batch-size 64|--batch-size 32" "--steps 4|--steps 6" \
              "--data $work/img-ok|--data $work/img-torn"; do
    a=${pair%|*} b=${pair#*|}
    # shellcheck disable=SC2086
    expect mpi 30 "ranks $pair" -- mpiexec --oversubscribe -np 1 "$m" "${mlp[@]}" $a : -np 1 "$m" "${mlp[@]}" $b
  done
  echo "abc" >"$work/a.txt"; for i in $(seq 200); do echo "line $i of one text" >>"$work/a.txt"; done
  sed 's/one/another/' "$work/a.txt" >"$work/b.txt"
  expect mpi 30 "ranks other data" -- mpiexec --oversubscribe -np 1 "$m" train "${gpt[@]}" --threads 1 --data "$work/a.txt" \
    : -np 1 "$m" train "${gpt[@]}" --threads 1 --data "$work/b.txt"
  says "data (rank 0:"
fi

# ---- 7. Telemetry records that cannot be true, and inspect's flags ---------------------------------
expect 0 60 telemetry-good -- "$m" train "${quick[@]}" --precision fp16 --telemetry "$work/t.jsonl" --telemetry-every 1
line=$(head -1 "$work/t.jsonl")
while IFS='|' read -r expr; do
  python3 -c "
import json, sys
r = json.loads(sys.argv[1])
$expr
print(json.dumps(r))" "$line" >"$work/t-bad.jsonl"
  expect 2 10 "telemetry $expr" -- "$m" inspect "$work/t-bad.jsonl"
done <<'EOF'
r['step'] = 0
r['step'] = -3
r['loss_scale'] = 0
r['loss_scale'] = -1
r['count'] = -1
r['zeros'] = r['count'] + 1
r['nonfinite'] = -1
r['amax'] = -1
r['amax'] = r['amax'] * 8
r['amax'] = 0
r['formats']['f16']['below_subnormal'] = 1.5
r['formats']['bf16']['below_normal'] = -0.1
r['formats']['e4m3']['overflow'] = 2
r['formats']['e5m2']['below_subnormal'] = 0.9; r['formats']['e5m2']['below_normal'] = 0.1
r['log2']['counts'][0] = -1
r['log2']['counts'][-1] += 1
r['log2']['lo'] = -5000
r['log2']['lo'] = 5000
r['kind'] = 'biases'
r['dtype'] = 'f7'
del r['formats']
r['count'] = 'many'
r['step'] = 1e300
EOF
for args in "--step -1" "--step 999" "--top 0" "--top -5" "--format fp7" "--format f32"; do
  # shellcheck disable=SC2086
  expect 2 10 "inspect $args" -- "$m" inspect "$work/t.jsonl" $args
done
printf '{"step": oops}\n' >"$work/t-json.jsonl"
expect 2 10 telemetry-not-json -- "$m" inspect "$work/t-json.jsonl"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
