#!/usr/bin/env bash
# Installs the Debian packages mantissa needs to build, test and run, only those missing.
# Safe to run twice; uses apt-get as root, or through sudo otherwise.
set -euo pipefail

packages=(
  cmake g++ make              # the build
  libcli11-dev                # command-line parsing of the mantissa command
  libfmt-dev                  # formatted output (tables)
  libdnnl-dev                 # oneDNN: CPU matmul, convolution, norms, eltwise, reorder
  ocl-icd-opencl-dev          # OpenCL headers and library: oneDNN's CMake package requires them (only recommended by libdnnl-dev)
  nlohmann-json3-dev          # JSON output (benchmarks, later metrics and checkpoints)
  zlib1g-dev                  # gzipped IDX data
  dataset-fashion-mnist       # the default image data set
  fortunes                    # the default text corpus
  python3                     # tests read checkpoints with an independent reader
  libgtest-dev libgmock-dev   # unit tests
  libbenchmark-dev            # benchmarks
  clang-14 libclang-rt-14-dev # libFuzzer and the sanitizers' runtimes for the fuzz targets (make fuzz)
  libomp-14-dev               # OpenMP for the library when clang builds it (the fuzz build)
  libopenmpi-dev openmpi-bin  # data-parallel training across processes (mpirun)
  iproute2                    # the data-parallel test in two network namespaces (ip netns)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
