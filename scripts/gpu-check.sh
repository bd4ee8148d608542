#!/usr/bin/env bash
# The device check of the CUDA backend, in one call on the lent GPU machine (under 8 minutes): what the
# machine is, the GPU test cases, and the parity of every op on cuda against the reference backend, with
# a count of the ops whose kernels are not on the GPU yet. It runs what scripts/gpu-pack.sh built and
# carried (build-gpu/carry/), with the machine's own cuBLASLt (PyTorch's, or the toolkit's). Everything
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
# cuBLASLt: the loader's, else the toolkit's, else the one inside PyTorch's wheels.
lt=$(ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13 / {print $NF; exit}')
[ -z "$lt" ] && lt=$(ls /usr/local/cuda*/lib*/libcublasLt.so.13 2>/dev/null | head -1)
if [ -z "$lt" ]; then
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  lt=$(find $site /usr/local/lib /opt -name 'libcublasLt.so.13' 2>/dev/null | head -1)
fi
echo "cuBLASLt: ${lt:-not found}"
export LD_LIBRARY_PATH="$PWD/$carry/lib${lt:+:$(dirname "$lt")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_WAIT_POLICY=passive
"$carry/bin/mantissa" info | sed -n '/^cuda/,$p'

section "GPU test cases (tests/gpu/cuda_test.cpp)"
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

section "not measured yet"
echo "GEMM rates against cuBLASLt's own and GPT-2 124M steps against PyTorch need the rest of the GPT's"
echo "kernels on the GPU (attention, layer norm, softmax + cross-entropy, embedding, reductions); see issue 13."
section "done"
