// The iteration over views that the CUDA backend's elementwise, copy and reduction kernels share: the
// offsets of the row-major element index i in up to N tensors of one shape. Plain C++ compiled for the
// host and the GPU (MANTISSA_HOST_DEVICE), so its dimension merging is tested on every machine
// (tests/unit/strided_test.cpp), GPU or not.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../../numeric/host_device.h"
#include "mantissa/core/tensor.h"

namespace mantissa::detail::cuda {

inline constexpr int kMaxDims = 8;

// Shape and the strides of up to N tensors over it; offsets of the row-major element index i (below the
// shape's element count: the outermost dimension needs no division, so one dimension needs none).
template <int N>
struct Strided {
  int rank = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[N][kMaxDims] = {};

  MANTISSA_HOST_DEVICE void offsets(std::int64_t i, std::int64_t (&off)[N]) const {
    for (int t = 0; t < N; ++t) off[t] = 0;
    for (int d = rank - 1; d > 0; --d) {
      const std::int64_t s = shape[d];
      const std::int64_t k = i % s;
      i /= s;
      for (int t = 0; t < N; ++t) off[t] += k * strides[t][d];
    }
    if (rank > 0) {
      for (int t = 0; t < N; ++t) off[t] += i * strides[t][0];
    }
  }
};

// The iteration over `shape` with the tensors' strides, in row-major order, with dimensions of size 1
// dropped and neighbours merged where every tensor steps through them as one (stride[d] = stride[d+1] *
// shape[d+1]): tensors contiguous alike become one dimension, and their elements cost no division.
// Throws for more than kMaxDims dimensions left.
template <int N>
Strided<N> strided(const Shape& shape, const Tensor* const (&tensors)[N], const char* what) {
  std::int64_t sizes[64];
  std::int64_t steps[64][N];
  int rank = 0;  // merged dimensions, innermost first
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const auto u = static_cast<std::size_t>(d);
    if (shape[u] == 1) continue;
    bool merges = rank > 0;
    for (int t = 0; t < N && merges; ++t) merges = tensors[t]->strides()[u] == steps[rank - 1][t] * sizes[rank - 1];
    if (merges) {
      sizes[rank - 1] *= shape[u];
      continue;
    }
    if (rank == 64) throw std::invalid_argument(std::string(what) + ": too many dimensions on cuda");
    sizes[rank] = shape[u];
    for (int t = 0; t < N; ++t) steps[rank][t] = tensors[t]->strides()[u];
    ++rank;
  }
  if (rank > kMaxDims) {
    throw std::invalid_argument(std::string(what) + ": more than " + std::to_string(kMaxDims) +
                                " dimensions (after merging) on cuda");
  }
  Strided<N> s;
  s.rank = rank;
  for (int d = 0; d < rank; ++d) {
    s.shape[d] = sizes[rank - 1 - d];
    for (int t = 0; t < N; ++t) s.strides[t][d] = steps[rank - 1 - d][t];
  }
  return s;
}

}  // namespace mantissa::detail::cuda
