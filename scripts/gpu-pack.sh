#!/usr/bin/env bash
# Builds, on a development machine (nvcc, no GPU), what scripts/gpu-check.sh runs on the lent GPU
# machine, which has the NVIDIA driver, CUDA and PyTorch but none of Debian's development packages: the
# CUDA build's test programs and command in build-gpu/ (MPI off: Open MPI's libraries are not there),
# and a folder build-gpu/carry/ with them and the shared libraries they need that such a machine may lack
# (oneDNN, fmt, ...) with the fused-attention plugin, packed as lib.tar.xz and bin.tar.xz (the device tool
# carries 64 MiB; oneDNN alone is 40 MB unpacked, each program about 29), and the data the GPU cases read. cuBLASLt (541 MB), cuDNN, NVRTC and
# NCCL are not carried: gpu-check.sh finds the machine's own (PyTorch's).
# Then, with the device tool:  run  command="bash scripts/gpu-check.sh"  carry=["build-gpu/carry"]
#
#   scripts/gpu-pack.sh                  build and pack build-gpu/carry
#   scripts/gpu-pack.sh --libs-only DIR  pack only the libraries of the programs in DIR/bin (and the
#                                        plugin in DIR/bin, if there) into DIR/lib.tar.xz, and the programs
#                                        into DIR/bin.tar.xz, and record the sources (DIR/sources.sha256);
#                                        gpu-check's dry run uses it on this build's command
# The carry records the commit and every build input's hash (sources.sha256): gpu-check.sh refuses a
# carry built from other sources than the ones it runs beside.
set -euo pipefail
cd "$(dirname "$0")/.."

# The shared libraries the programs in $1/bin name, except the C library's own and the CUDA driver's,
# packed as $1/lib.tar.xz with the fused-attention plugin when $2 names one.
pack_libs() {
  local carry=$1 plugin=${2:-}
  rm -rf "$carry/lib" && mkdir -p "$carry/lib"
  for b in "$carry"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libmvec|libdl|libpthread|librt|ld-linux[^/]*|libcuda)\.so' |
    while read -r lib; do cp -L "$lib" "$carry/lib/"; done
  if [ -n "$plugin" ] && [ -f "$plugin" ]; then
    cp "$plugin" "$carry/lib/" && strip "$carry/lib/$(basename "$plugin")"
  else
    echo "gpu-pack: no fused-attention plugin (no cuDNN frontend): attention on the GPU will be the composition" >&2
  fi
  tar -C "$carry" -cJf "$carry/lib.tar.xz" lib && rm -rf "$carry/lib"
  # The programs too (each holds every kernel's GPU code: about 29 MB, 6 packed).
  tar -C "$carry" -cJf "$carry/bin.tar.xz" bin && rm -rf "$carry/bin"
}

# $1/sources.sha256: the commit, and the hash of each build input as it is in this tree (uncommitted
# changes included), which gpu-check.sh checks against the files it runs beside (the GPU machine's copy
# has no .git) before it runs anything.
record_sources() {
  local carry=$1
  git rev-parse HEAD > /dev/null || { echo "gpu-pack: not a git checkout: cannot record the carry's sources" >&2; exit 1; }
  {
    echo "# commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src include tools tests python cmake CMakeLists.txt || echo ' with uncommitted changes')"
    git ls-files -z -- src include tools tests python cmake CMakeLists.txt | xargs -0 sha256sum
  } > "$carry/sources.sha256"
}

if [ "${1:-}" = "--libs-only" ]; then
  pack_libs "${2:?--libs-only needs a folder with bin/}" "${2}/bin/libmantissa_cudnn_sdpa.so"
  record_sources "$2"
  exit 0
fi

scripts/install-deps.sh  # the cuDNN frontend's headers (.deps/), for the fused-attention plugin
configured=$(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=ON -DMANTISSA_WITH_MPI=OFF \
  -DMANTISSA_BUILD_BENCHMARKS=OFF -DMANTISSA_BUILD_FUZZERS=OFF)
grep -q "mantissa: CUDA backend on" <<<"$configured" || { echo "gpu-pack: no CUDA compiler found (nvcc)" >&2; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target gpu_tests parity_tests mantissa_cli
rm -rf build-gpu/carry && mkdir -p build-gpu/carry/bin
cp build-gpu/bin/gpu_tests build-gpu/bin/parity_tests build-gpu/bin/mantissa build-gpu/carry/bin/
strip build-gpu/carry/bin/*
pack_libs build-gpu/carry build-gpu/bin/libmantissa_cudnn_sdpa.so
record_sources build-gpu/carry
# The data the GPU cases and the quality runs read, for a machine without Debian's data packages: the
# fortunes (regular files only: the .u8 links would not travel) and Fashion-MNIST's test split.
mkdir -p build-gpu/carry/data/fortunes build-gpu/carry/data/fashion-mnist
find /usr/share/games/fortunes -maxdepth 1 -type f -exec cp {} build-gpu/carry/data/fortunes/ \;
cp /usr/share/datasets/fashion-mnist/t10k-* build-gpu/carry/data/fashion-mnist/
du -sh build-gpu/carry
