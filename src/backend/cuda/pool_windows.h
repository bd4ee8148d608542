// Which pooling windows cover an input position, along one axis: the backward of pooling on the GPU
// gathers each input's gradient from these windows (no atomics). Plain C++ for the host and the GPU, so
// it is tested against a brute-force count on every machine (tests/unit/pool_windows_test.cpp).
#pragma once

#include <cstdint>

#include "../../numeric/host_device.h"

namespace mantissa::detail::cuda {

// The first and last output index o whose window [o stride - pad, o stride - pad + kernel) covers input
// index i, among outputs [0, outputs); empty when first > last.
MANTISSA_HOST_DEVICE inline void covering_windows(std::int64_t i, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                                                  std::int64_t outputs, std::int64_t& first, std::int64_t& last) {
  const std::int64_t hi = i + pad, lo = i + pad - kernel + 1;  // o stride must lie in [lo, hi]
  first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  last = hi / stride < outputs - 1 ? hi / stride : outputs - 1;
}

}  // namespace mantissa::detail::cuda
