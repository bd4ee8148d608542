// The iteration over views that the CUDA backend's elementwise, copy and reduction kernels share: the
// offsets of the row-major element index i in up to N tensors of one shape. Plain C++ compiled for the
// host and the GPU (MANTISSA_HOST_DEVICE), so its dimension merging and its division are tested on every
// machine (tests/unit/strided_test.cpp), GPU or not.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../../numeric/host_device.h"
#include "mantissa/core/tensor.h"

namespace mantissa::detail::cuda {

inline constexpr int kMaxDims = 8;

// Division of 32-bit numerators below 2^31 by a divisor fixed at launch (1 <= d < 2^31) as a multiply-high,
// an add and a shift, with the magic number worked out once on the host (Granlund and Montgomery's
// round-up method): a GPU has no integer divider, and a 64-bit division there is a long subroutine,
// which made index arithmetic, not memory, the cost of copying permuted views.
struct FastDivisor {
  std::uint32_t divisor = 1, magic = 0, shift = 0;

  FastDivisor() = default;
  explicit FastDivisor(std::uint32_t d) : divisor(d) {
    if (d == 0 || d > 0x7fffffffU) throw std::invalid_argument("FastDivisor: the divisor must be in [1, 2^31)");
    while ((std::uint64_t{1} << shift) < d) ++shift;  // shift = ceil(log2 d)
    // magic = floor(2^32 (2^shift - d) / d) + 1, below 2^32 since 2^shift < 2d.
    magic = static_cast<std::uint32_t>(((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d)) / d + 1);
  }

  // n / divisor for n < 2^31 (the sum below then stays under 2^32).
  MANTISSA_HOST_DEVICE std::uint32_t quotient(std::uint32_t n) const {
#ifdef __CUDA_ARCH__
    const std::uint32_t high = __umulhi(n, magic);
#else
    const auto high = static_cast<std::uint32_t>((static_cast<std::uint64_t>(n) * magic) >> 32);
#endif
    return (high + n) >> shift;
  }
};

// Shape and the strides of up to N tensors over it; offsets of the row-major element index i (below the
// shape's element count: the outermost dimension needs no division, so one dimension needs none).
// Shapes of fewer than 2^31 elements (index32) divide with FastDivisor; larger ones in 64 bits.
template <int N>
struct Strided {
  int rank = 0;
  bool index32 = false;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[N][kMaxDims] = {};
  FastDivisor divisors[kMaxDims];  // shape[d]'s, when index32

  MANTISSA_HOST_DEVICE void offsets(std::int64_t i, std::int64_t (&off)[N]) const {
    for (int t = 0; t < N; ++t) off[t] = 0;
    if (index32) {
      auto j = static_cast<std::uint32_t>(i);
      for (int d = rank - 1; d > 0; --d) {
        const std::uint32_t q = divisors[d].quotient(j);
        const std::int64_t k = j - q * divisors[d].divisor;
        j = q;
        for (int t = 0; t < N; ++t) off[t] += k * strides[t][d];
      }
      i = j;
    } else {
      for (int d = rank - 1; d > 0; --d) {
        const std::int64_t s = shape[d];
        const std::int64_t k = i % s;
        i /= s;
        for (int t = 0; t < N; ++t) off[t] += k * strides[t][d];
      }
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
  std::int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    s.shape[d] = sizes[rank - 1 - d];
    count *= s.shape[d];
    for (int t = 0; t < N; ++t) s.strides[t][d] = steps[rank - 1 - d][t];
  }
  s.index32 = count <= 0x7fffffff;
  if (s.index32) {
    for (int d = 0; d < rank; ++d) s.divisors[d] = FastDivisor(static_cast<std::uint32_t>(s.shape[d]));
  }
  return s;
}

}  // namespace mantissa::detail::cuda
