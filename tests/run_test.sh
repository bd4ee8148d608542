#!/bin/sh
# ctest's launcher for the GoogleTest programs (their CROSSCOMPILING_EMULATOR): OpenMP threads wait
# passively (ctest runs two programs at once on 2 cores, and spinning waits made the suite 3x slower), and
# with --cap-avx2 among the arguments, oneDNN and mantissa's own kernels are capped to AVX2, so that the
# portable fallbacks (bf16 without AVX-512) are tested on every machine. (ctest's ENVIRONMENT property
# would do, but gtest_discover_tests in CMake 3.25 keeps only the first variable of a list of them.)
export OMP_WAIT_POLICY=passive
program=$1
shift
for arg do
  shift
  if [ "$arg" = --cap-avx2 ]; then
    export ONEDNN_MAX_CPU_ISA=AVX2 MANTISSA_ISA=avx2
  else
    set -- "$@" "$arg"
  fi
done
exec "$program" "$@"
