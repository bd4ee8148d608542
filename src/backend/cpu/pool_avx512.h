// 2x2 max-pooling kernels with AVX-512 (pool_avx512.cpp); call them only where active_isa() has it.
#pragma once

#include <cstdint>

namespace mantissa::detail {

// gin's rows [0, 2 oh) x columns [0, 2 windows) from the 2x2 windows [0, windows) of each row pair
// (windows a multiple of 8, at most ow): the window's gradient to its first NaN, else its first
// maximum in reading order, 0 to the other three.
void max_pool_2x2_backward_avx512(const float* in, const float* g, float* gin, std::int64_t w, std::int64_t oh,
                                  std::int64_t ow, std::int64_t windows);

}  // namespace mantissa::detail
