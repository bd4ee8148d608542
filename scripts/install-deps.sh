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
  python3-dev pybind11-dev libdlpack-dev  # the Python module (python/): headers, bindings, DLPack's header
  python3-numpy python3-pytest            # ... its arrays and its test suite
  python3-venv python3-pip python3-setuptools python3-wheel  # ... `pip install .` (and its test, in a venv)
  libgtest-dev libgmock-dev   # unit tests
  libbenchmark-dev            # benchmarks
  clang-14 libclang-rt-14-dev # libFuzzer and the sanitizers' runtimes for the fuzz targets (make fuzz)
  libomp-14-dev               # OpenMP for the library when clang builds it (the fuzz build)
  libopenmpi-dev openmpi-bin  # data-parallel training across processes (mpirun)
  iproute2                    # the data-parallel test in two network namespaces (ip netns)
  xz-utils                    # gpu-check's carried libraries (tar -J), rehearsed by its dry run
)

# Where the CUDA toolkit is: the headers of NVIDIA's cuDNN frontend (header-only, from PyPI's
# nvidia-cudnn-frontend wheel), unpacked into .deps/ for the fused-attention plugin, not installed. Without
# pip or a network the build leaves the plugin out and says so.
fetch_cudnn_frontend() {
  local version=1.32.0
  local dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/cudnn-frontend"
  [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || return 0
  [ -f "$dir/include/cudnn_frontend.h" ] && [ "$(cat "$dir/version" 2>/dev/null)" = "$version" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64        -d "$tmp" "nvidia-cudnn-frontend==$version" >/dev/null 2>&1 &&
     python3 -m zipfile -e "$tmp"/nvidia_cudnn_frontend-*.whl "$tmp/wheel" >/dev/null 2>&1; then
    rm -rf "$dir" && mkdir -p "$dir" && mv "$tmp/wheel/include" "$dir/include" && echo "$version" > "$dir/version"
    echo "install-deps: cuDNN frontend $version headers in $dir"
  else
    echo "install-deps: could not fetch the cuDNN frontend (pip download nvidia-cudnn-frontend==$version); the fused-attention plugin is left out"
  fi
  rm -rf "$tmp"
}
fetch_cudnn_frontend

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
