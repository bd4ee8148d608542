#!/usr/bin/env bash
# The device check of the CUDA backend, for a short slice of a lent GPU machine: the headline first,
# then the rest by what it is worth, inside a time budget (default 360 s). Parts, in this order unless
# --parts gives another:
#   (always) the machine, the carry checked against the sources it runs beside, `mantissa info`;
#   attention: cuDNN's fused attention alone, so that a crash or a hang there costs the headline nothing
#      (the rest then runs with MANTISSA_ATTENTION=unfused);
#   headline: GPT-2 124M (batch 16 x 1024, AdamW, GPT-2's tanh GELU) in bf16 autocast, mantissa then
#      PyTorch eager, each printed as one line the moment it ends (ms/step, tokens/s, TFLOP/s, peak
#      memory, host waits); if mantissa's step crashes, once more with the kernels that never ran on a
#      GPU switched to their earlier ways (src/backend/cuda/kernel_ways.h);
#   correctness: the GPU test cases (NCCL's among them), parity of every op on cuda against the reference;
#   precisions: fp16 (both), tf32 and fp32 (mantissa), then the table and where mantissa's step goes on
#      the GPU's own clock;
#   compile: PyTorch bf16 with torch.compile;  quality: the char GPT on the GPU;
#   fp8: tensor cores, emulated, current scaling;
#   kernels: mantissa's bf16 step by each kernel (MANTISSA_KERNEL_TIMES=kernel), against it the step
#      with each kernel's other way, and Nsight Systems' summary of the GPU's kernels where there is nsys.
# --parts LIST runs the parts named, in the order named (attention, headline, correctness, precisions,
# compile, quality, fp8, kernels), comma-separated: a second slice of GPU time for what the first left.
# Every command runs under `timeout -k` (a hung one is killed); a part starts only if its own limit fits
# in what is left of the budget (else: "not run"), so a cut-off run still has every line it finished in
# the log. A part whose command fails runs that command once more with CUDA_LAUNCH_BLOCKING=1, so that
# the error names the kernel that failed, not a later one. Results: $OUT/gpu-check.log and
# $OUT/gpu-check-results.tar.gz (every JSON and error output), rewritten after each part.
#
# It runs what scripts/gpu-pack.sh built and carried (build-gpu/carry/): the carried Debian libraries
# (oneDNN, fmt, ...) go to mantissa's programs only, never to PyTorch's; cuBLASLt, cuDNN, NVRTC and NCCL
# are the machine's own (PyTorch's wheels', or the toolkit's). The carry's sources.sha256 (the commit and
# each build input's hash) must match the files the check runs beside: a carry built from other sources
# is refused before any GPU time is spent on it (--stale-carry runs it anyway, saying so).
#
#   scripts/gpu-check.sh [--budget SECONDS] [--parts LIST] [--stale-carry] [--dry-run] [CARRY]
# --dry-run rehearses it here, without a GPU (a ctest case): the arguments, the carry's libraries packed
# from this build (build/bin) and unpacked as on the GPU machine, the sources check (and its refusal of
# a changed file), the order and budget of the parts (each GPU command printed, not run), a failing
# command's rerun, and the report from results made by this build's own `mantissa bench` on the CPU and
# a sample of PyTorch's.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=360
all_parts=attention,headline,correctness,precisions,compile,quality,fp8,kernels
parts=$all_parts
dry=0
stale_ok=0
carry=build-gpu/carry
bin_dir=build/bin
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --budget=*) budget=${1#--budget=}; shift ;;
    --parts) parts=${2:?--parts needs a list}; shift 2 ;;
    --parts=*) parts=${1#--parts=}; shift ;;
    --dry-run) dry=1; shift ;;
    --stale-carry) stale_ok=1; shift ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,38p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) carry=$1; shift ;;
  esac
done
case $budget in ''|*[!0-9]*) echo "gpu-check: --budget takes whole seconds, not '$budget'" >&2; exit 2 ;; esac
for p in ${parts//,/ }; do
  case ",$all_parts," in *",$p,"*) ;; *) echo "gpu-check: unknown part '$p' (parts: $all_parts)" >&2; exit 2 ;; esac
done

out=${OUT:-/tmp/gpu-check-out}
[ "$dry" = 1 ] && out=$(mktemp -d /tmp/gpu-check-dry.XXXXXX)
mkdir -p "$out"
results=$(mktemp -d /tmp/gpu-check-results.XXXXXX)
# A rehearsal leaves nothing behind, however it ends (the folders below are made as it goes).
carry_made="" libs_made="" bin_made=""
[ "$dry" = 1 ] && trap 'rm -rf "$results" "$out" $carry_made $libs_made $bin_made' EXIT
exec > >(tee "$out/gpu-check.log") 2>&1
started=$(date +%s)
elapsed() { echo $(( $(date +%s) - started )); }
section() { printf '\n== %s (%ss)\n' "$1" "$(elapsed)"; }
save() { tar -C "$results" -czf "$out/gpu-check-results.tar.gz" . 2>/dev/null; }

# part LIMIT NAME COMMAND...: runs COMMAND under `timeout -k 5 LIMIT` if LIMIT fits in what is left (a
# reserve of 5 s for the report), its standard output to $results/NAME.json and its errors to
# NAME.err; says why when it fails, and the first failure of each part is run once more with
# CUDA_LAUNCH_BLOCKING=1 (errors to NAME-blocking.err; its last line printed), where the budget allows.
# In a dry run, prints the command instead (rehearse=1: runs it all the same).
current_part=""
reran_in=""
rehearse=0
part() {
  local limit=$1 name=$2
  shift 2
  local left=$(( budget - 5 - $(elapsed) ))
  if [ "$limit" -gt "$left" ]; then
    echo "$name: not run (needs ${limit} s, ${left} s of the budget left)"
    echo "not run: out of budget" > "$results/$name.err"
    return 3
  fi
  if [ -z "$(type -P "$1")" ]; then
    echo "$name: '$1' is not a program timeout can run"
    [ "$dry" = 1 ] && exit 1
    return 2
  fi
  if [ "$dry" = 1 ] && [ "$rehearse" = 0 ]; then
    echo "$name: would run (limit ${limit} s): $*"
    return 0
  fi
  timeout -k 5 "$limit" "$@" > "$results/$name.json" 2> "$results/$name.err"
  local status=$?
  if [ $status -eq 124 ] || [ $status -eq 137 ]; then
    echo "$name: cut off after ${limit} s"
  elif [ $status -ne 0 ]; then
    echo "$name: failed (status $status): $(tail -1 "$results/$name.err")"
    left=$(( budget - 5 - $(elapsed) ))
    if [ "$reran_in" != "$current_part" ] && [ "$limit" -le "$left" ]; then
      reran_in=$current_part
      CUDA_LAUNCH_BLOCKING=1 timeout -k 5 "$limit" "$@" > /dev/null 2> "$results/$name-blocking.err"
      echo "$name with CUDA_LAUNCH_BLOCKING=1 (status $?): $(tail -1 "$results/$name-blocking.err")"
    fi
  fi
  save
  return $status
}

# check_sources MANIFEST (sources.sha256, written by gpu-pack.sh): whether every file MANIFEST hashes has that hash here; names those that differ.
check_sources() {
  local manifest=$1 differ
  [ -f "$manifest" ] || { echo "no $manifest: a carry from before carries recorded their sources"; return 1; }
  differ=$(grep -v '^#' "$manifest" | timeout -k 2 60 sha256sum --check --quiet --strict 2>&1) && return 0
  echo "the carry was built from other sources than these ($(grep -m1 '^# commit' "$manifest" | cut -c3-)): $(grep -v WARNING <<<"$differ" | head -5 | tr '\n' ' ')"
  return 1
}

# Where the carry unpacks: fixed on the GPU machine; a folder of its own for each dry run, so that two
# rehearsals at once (ctest -j) never run a program the other is unpacking.
libs=/tmp/mantissa-carry-lib
bin=/tmp/mantissa-carry-bin
if [ "$dry" = 1 ]; then
  libs=$(mktemp -d /tmp/gpu-check-lib.XXXXXX)
  bin=$(mktemp -d /tmp/gpu-check-bin.XXXXXX)
  libs_made=$libs bin_made=$bin
fi

section "machine"
if [ "$dry" = 1 ]; then
  # The carry as gpu-pack.sh makes it, from this build's command.
  carry=$(mktemp -d /tmp/gpu-check-carry.XXXXXX)
  carry_made=$carry
  mkdir -p "$carry/bin" && cp "$bin_dir/mantissa" "$carry/bin/" || { echo "dry run: no $bin_dir/mantissa (build first)"; exit 1; }
  [ -f "$bin_dir/libmantissa_cudnn_sdpa.so" ] && cp "$bin_dir/libmantissa_cudnn_sdpa.so" "$carry/bin/"
  XZ_OPT=-0 scripts/gpu-pack.sh --libs-only "$carry" || { echo "dry run: packing the libraries failed"; exit 1; }  # fast: a rehearsal
  # The sources check refuses a carry whose sources differ: one file's hash changed in a copy.
  awk '!done && !/^#/ {$0 = (substr($0, 1, 1) == "0" ? "1" : "0") substr($0, 2); done = 1} {print}' "$carry/sources.sha256" \
    > "$carry/changed.sha256"
  echo "rehearsal of a changed source: $(check_sources "$carry/changed.sha256" && echo "dry run: it went unnoticed")"
  check_sources "$carry/changed.sha256" > /dev/null && exit 1
else
  timeout -k 2 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
fi
if check_sources "$carry/sources.sha256"; then
  echo "carry: built from these sources ($(grep -m1 '^# commit' "$carry/sources.sha256" | cut -c3-))"
elif [ "$stale_ok" = 1 ]; then
  echo "carry: run anyway (--stale-carry): its programs are not these sources'"
else
  echo "refused: rebuild the carry here (scripts/gpu-pack.sh), or pass --stale-carry; no GPU command was run"
  save
  exit 1
fi
# The NVIDIA libraries mantissa loads with dlopen (cuBLASLt, cuDNN, NCCL; NVRTC for cuDNN's runtime-
# compiled engines): the loader's, else the toolkit's, else the ones in PyTorch's wheels (nvidia/*/lib).
# (Each search under a timeout: a slow file system must not take the slice.)
site=$(timeout -k 2 20 python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
find_lib() {
  local found
  found=$(timeout -k 2 10 ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  [ -z "$found" ] && found=$(ls /usr/local/cuda*/lib*/"$1" 2>/dev/null | head -1)
  [ -z "$found" ] && found=$(timeout -k 2 20 find $site /usr/local/lib /opt -name "$1" 2>/dev/null | head -1)
  echo "$found"
}
dirs=""
for lib in libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
  path=$(find_lib $lib)
  echo "$lib: ${path:-not found}"
  [ -n "$path" ] && dirs="$dirs:$(dirname "$path")"
done
# mantissa's programs run with the carried libraries, as a program (env) that timeout can run; PyTorch
# with the machine's environment as it is.
menv=(env LD_LIBRARY_PATH="$libs$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
m() { "${menv[@]}" "$bin/mantissa" "$@"; }
rm -rf "$libs" && mkdir -p "$libs" && tar -C "$libs" --strip-components=1 -xJf "$carry/lib.tar.xz" || echo "cannot unpack $carry/lib.tar.xz"
rm -rf "$bin" && mkdir -p "$bin" && tar -C "$bin" --strip-components=1 -xJf "$carry/bin.tar.xz" || echo "cannot unpack $carry/bin.tar.xz"
echo "carried libraries: $(ls "$libs" | wc -l) ($(ls "$libs" | grep -c dnnl) of oneDNN)"
export MANTISSA_SDPA_PLUGIN="$libs/libmantissa_cudnn_sdpa.so"
export OMP_WAIT_POLICY=passive
if [ "$dry" = 0 ]; then
  # The data sets where mantissa looks for them, from the carry when the machine lacks Debian's packages.
  for d in /usr/share/games/fortunes /usr/share/datasets/fashion-mnist; do
    if [ ! -d "$d" ]; then
      mkdir -p "$d" && cp "$carry/data/$(basename "$d")"/* "$d"/ && echo "data: $d from the carry" ||
        echo "data: cannot create $d (the cases that read it will fail)"
    fi
  done
fi
timeout -k 5 30 "${menv[@]}" "$bin/mantissa" info | sed -n '/^cuda/,$p' | head -40
py=$(command -v python3 || true)
if [ "$dry" = 0 ] && [ -n "$py" ] && ! timeout -k 5 60 "$py" -c 'import torch' 2>/dev/null; then py=""; fi
[ -z "$py" ] && echo "no python with torch here: PyTorch's side is not timed"
report() { python3 scripts/gpu_report.py "$@"; }
# GPT-2's own GELU, the tanh form, on both sides (runs 1-3 timed the erf form: PyTorch's 47.7 and 34.0).
gpt2=(bench --model gpt2-124m --device cuda --mode autocast --steps 5 --warmup 2 --gelu tanh --json)
torch_gpt2=(bench/pytorch/bench.py --model gpt2-124m --device cuda --steps 5 --warmup 2 --gelu tanh)
# pair LIMIT PRECISION: GPT-2 in mantissa, then in PyTorch (where there is one), a line each as it ends.
pair() {
  part "$1" "mantissa-$2" "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision "$2"
  report line "$results" "mantissa-$2"
  if [ -n "$py" ]; then
    part "$1" "pytorch-$2" "$py" "${torch_gpt2[@]}" --precision "$2"
    report line "$results" "pytorch-$2"
  fi
}

run_attention() {
  section "attention: cuDNN's fused attention alone, before anything that uses it"
  # A crash or a hang in cuDNN's fused attention must not take the rest with it: only then does the rest
  # run unfused. A refused shape or a wrong value is a failed case, printed, and the fused kernel stays.
  part 20 fused-attention "${menv[@]}" "$bin/gpu_tests" --gtest_filter='*FusedAttention*' --gtest_brief=1
  local status=$?
  [ -s "$results/fused-attention.json" ] && tail -15 "$results/fused-attention.json"
  if [ $status -eq 124 ] || [ $status -eq 137 ] || [ $status -gt 128 ]; then
    echo "fused attention crashed or hung (status $status): the runs below use MANTISSA_ATTENTION=unfused"
    export MANTISSA_ATTENTION=unfused
  fi
}

# The kernels that have not run on a GPU before, each switched to its earlier way (kernel_ways.h): where
# mantissa's headline step crashes, the check runs the rest this way, and says so.
earlier_ways=(MANTISSA_ADD_LAYER_NORM=separate MANTISSA_CROSS_ENTROPY=unpacked MANTISSA_GELU_EPILOGUE=off
              MANTISSA_LAYER_NORM_BACKWARD=two-pass MANTISSA_BIAS_GRADIENT=separate)
run_headline() {
  section "headline: GPT-2 124M bf16 autocast, batch 16 x 1024 (target <= 38 ms; PyTorch eager measured 47.7, compiled 34.0, erf GELU)"
  part 45 mantissa-bf16 "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision bf16
  local status=$?
  if [ $status -ne 0 ] && [ $status -ne 3 ] && [ $status -ne 124 ] && [ $status -ne 137 ]; then
    echo "mantissa's step failed: the rest runs with the earlier kernels: ${earlier_ways[*]}"
    export "${earlier_ways[@]}"
    part 45 mantissa-bf16 "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision bf16
  fi
  report line "$results" mantissa-bf16
  if [ -n "$py" ]; then
    part 45 pytorch-bf16 "$py" "${torch_gpt2[@]}" --precision bf16
    report line "$results" pytorch-bf16
  fi
}

run_correctness() {
  section "correctness: the GPU cases, parity on cuda"
  part 40 gpu-tests "${menv[@]}" "$bin/gpu_tests" --gtest_brief=1
  [ -s "$results/gpu-tests.json" ] && tail -25 "$results/gpu-tests.json"
  part 50 parity-cuda "${menv[@]}" "$bin/parity_tests" --gtest_filter='*CudaBackendMatchesReference*'
  if [ -s "$results/parity-cuda.json" ]; then
    f=$results/parity-cuda.json
    echo "parity: $(grep -c '^\[       OK \]' "$f") passed, $(grep -c '^\[  FAILED  \].*Cuda.*(' "$f") failed," \
      "$(grep -c '^\[  SKIPPED \].*(' "$f") skipped (a crash: the last '[ RUN' line of parity-cuda.json in the tarball)"
    grep -o '[a-z0-9_]*: no kernel for device cuda:0' "$f" | sort | uniq -c | sort -rn
    grep -B2 -A12 '^\[  FAILED  \].*(' "$f" | grep -v '^\[ RUN' | head -60
  fi
}

run_precisions() {
  section "the other precisions: fp16 (both), tf32 and fp32 (mantissa)"
  pair 25 fp16
  part 25 mantissa-tf32 "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision fp32 --tf32
  report line "$results" mantissa-tf32
  part 25 mantissa-fp32 "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision fp32
  report line "$results" mantissa-fp32
  report table "$results"
}

run_compile() {
  section "PyTorch bf16 with torch.compile"
  if [ -n "$py" ]; then
    part 60 pytorch-bf16-compile "$py" "${torch_gpt2[@]}" --precision bf16 --compile
    report line "$results" pytorch-bf16-compile
  fi
}

run_quality() {
  section "quality: the char GPT of docs/results.md on the GPU (target: within 1% of the CPU's fp32 1.8870)"
  for p in bf16 fp16; do
    part 40 quality-$p "${menv[@]}" "$bin/mantissa" train --model gpt --device cuda --precision $p --steps 1000 \
      --batch-size 16 --lr 1e-3 --warmup 100 --eval-every 1000 --eval-batches 20 --seed 1 --json
  done
  report quality "$results"
}

run_fp8() {
  section "fp8: delayed scaling on fp8 tensor cores, then emulated as bf16 products; current scaling (its scales stay on the GPU)"
  part 25 mantissa-fp8 "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision fp8 --fp8-recipe delayed
  report line "$results" mantissa-fp8
  MANTISSA_FP8_PRODUCTS=emulated part 25 mantissa-fp8-emulated "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" \
    --precision fp8 --fp8-recipe delayed
  report line "$results" mantissa-fp8-emulated
  part 25 mantissa-fp8-current "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision fp8 --fp8-recipe current
  report line "$results" mantissa-fp8-current
}

run_kernels() {
  section "kernels: mantissa's bf16 step by kernel on the GPU's clock, then Nsight Systems' summary where there is nsys"
  MANTISSA_KERNEL_TIMES=kernel part 45 mantissa-bf16-kernels "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision bf16
  report kernels "$results" mantissa-bf16-kernels
  # The MLP's GELU without cuBLASLt's epilogues (the product, then the GELU kernels): against the step
  # above, matmul_gelu and matmul_gelu_backward should cost about what plain products do there, and the
  # unary and unary_backward lines here are what the epilogues save.
  MANTISSA_GELU_EPILOGUE=off MANTISSA_KERNEL_TIMES=kernel part 45 mantissa-bf16-gelu-kernels "${menv[@]}" "$bin/mantissa" \
    "${gpt2[@]}" --precision bf16
  report against "$results" mantissa-bf16-kernels mantissa-bf16-gelu-kernels
  # The other ways, in one run: the bias gradients as their own products beside plain weight-gradient
  # products (no BGRADB epilogue), and layer norm's backward in two passes. Its matmul_row_sums and
  # layer_norm_backward against the lines above say which way is faster.
  MANTISSA_BIAS_GRADIENT=separate MANTISSA_LAYER_NORM_BACKWARD=two-pass MANTISSA_KERNEL_TIMES=kernel \
    part 45 mantissa-bf16-kernels-other-ways "${menv[@]}" "$bin/mantissa" "${gpt2[@]}" --precision bf16
  report kernels "$results" mantissa-bf16-kernels-other-ways
  report against "$results" mantissa-bf16-kernels mantissa-bf16-kernels-other-ways
  nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$nsys" ] && [ "$dry" = 0 ]; then
    # The trace stays out of the results (it is large); its kernel summary is kept.
    part 90 nsys "$nsys" profile --force-overwrite=true --stats=false -o /tmp/mantissa-step "${menv[@]}" "$bin/mantissa" \
      bench --model gpt2-124m --device cuda --mode autocast --steps 3 --warmup 1 --precision bf16 &&
      part 60 nsys-kernels "$nsys" stats --report cuda_gpu_kern_sum --format csv /tmp/mantissa-step.nsys-rep
    [ -s "$results/nsys-kernels.json" ] && grep -m 30 -v '^$' "$results/nsys-kernels.json" | cut -c1-220
  else
    echo "nsys: not on this machine"
  fi
}

# The parts, in the order asked; each part's first failing command is rerun once (part()).
for p in ${parts//,/ }; do
  current_part=$p
  "run_$p"
done

if [ "$dry" = 1 ]; then
  # A failing command, run for real: the failure and its rerun with CUDA_LAUNCH_BLOCKING=1 are reported.
  current_part=rehearsal
  rehearse=1 part 20 rehearsal "$bin_dir/mantissa" train --model no-such-model > "$results/rehearsal.log"
  rehearse=0
  cat "$results/rehearsal.log"
  grep -q '^rehearsal: failed (status 2): ' "$results/rehearsal.log" &&
    grep -q '^rehearsal with CUDA_LAUNCH_BLOCKING=1 (status 2): ' "$results/rehearsal.log" ||
    { echo "dry run: a failing command was not reported and rerun"; exit 1; }
  section "dry run: the report from this build's own results (CPU) and a sample of PyTorch's"
  bench_cpu=(bench --model gpt-small --n-layer 1 --n-embd 64 --block-size 32 --batch-size 2 --steps 2 --warmup 1 --threads 1 --json)
  for p in bf16 fp16 fp32; do
    m "${bench_cpu[@]}" --precision $p > "$results/mantissa-$p.json" 2> "$results/mantissa-$p.err" ||
      { echo "dry run: mantissa bench $p failed: $(tail -1 "$results/mantissa-$p.err")"; exit 1; }
  done
  m "${bench_cpu[@]}" --precision fp8 --fp8-recipe current > "$results/mantissa-fp8-current.json" \
    2> "$results/mantissa-fp8-current.err" || { echo "dry run: mantissa bench fp8 failed: $(tail -1 "$results/mantissa-fp8-current.err")"; exit 1; }
  cp tests/fixtures/gpu-check/pytorch-*.json "$results/"
  echo "not run: dry run" > "$results/mantissa-fp8.err"
  # Each line as the real run prints it; the rehearsal fails where one lacks what it should say.
  expect() {  # expect REGEX TEXT
    echo "$2"
    grep -qE "$1" <<<"$2" || { echo "dry run: the line above does not match /$1/"; exit 1; }
  }
  expect '^mantissa-bf16: [0-9.]+ ms/step, .*TFLOP/s .*peak .* GiB, 0\.0 host waits/step$' "$(report line "$results" mantissa-bf16)"
  expect '^pytorch-bf16: 47\.7 ms/step, .*peak 21\.5 GiB$' "$(report line "$results" pytorch-bf16)"
  expect '^pytorch-bf16-compile: 34\.0 ms/step' "$(report line "$results" pytorch-bf16-compile)"
  expect '^mantissa-fp8: no result \(not run: dry run\)$' "$(report line "$results" mantissa-fp8)"
  # (On the CPU no product runs on fp8 tensor cores: the count says so, where a GPU's says how many did.)
  expect '^mantissa-fp8-current: [0-9.]+ ms/step, .*, 0 products/step on fp8 tensor cores$' "$(report line "$results" mantissa-fp8-current)"
  expect '^bf16 +[0-9.]+ +47\.7 ' "$(report table "$results" | sed -n 2p)"
  expect '^  bf16: .*(matmul|attention)' "$(report table "$results" | grep '^  bf16:')"
  expect '^quality bf16: no result' "$(report quality "$results" | sed -n 1p)"
  # (The largest part first: which one depends on the machine and its load, so any part; matmul among them.)
  expect '^  [a-z][a-z0-9_ ]* +[0-9.]+ ' "$(report kernels "$results" mantissa-bf16 | sed -n 3p)"
  expect '^  matmul +[0-9.]+ ' "$(report kernels "$results" mantissa-bf16)"
  expect '^mantissa-bf16 [0-9.]+ ms/step against mantissa-fp16 [0-9.]+ ms/step \([-+][0-9.]+ ms\)$' \
    "$(report against "$results" mantissa-bf16 mantissa-fp16 | sed -n 1p)"
  # (Which part differs most varies from run to run; part names may hold a space: 'outside kernels'.)
  expect '^  [a-z][a-z0-9_ ]* +[0-9.]+ +[0-9.]+ +[-+][0-9.]+$' "$(report against "$results" mantissa-bf16 mantissa-fp16 | sed -n 3p)"
  save
  echo "results: $(tar -tzf "$out/gpu-check-results.tar.gz" | grep -c '\.json$') JSON files in $out/gpu-check-results.tar.gz"
fi
save
section "done"
exit 0
