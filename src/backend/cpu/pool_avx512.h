// 2x2 max-pooling kernels with AVX-512 (pool_avx512.cpp); call them only where active_isa() has it.
#pragma once

#include <cstdint>

namespace mantissa::detail {

// Both walk `pairs` row pairs stored one after the other: pair r's rows are in[2 r w, (2 r + 1) w) and
// [(2 r + 1) w, (2 r + 2) w), its ow = w / 2 windows' values out[r ow, (r + 1) ow). Input f32, or bf16
// (its bits, read in place).

// Each window's maximum, the later of two NaN in the scalar loops' order (max_pool_2x2 in cpu_pool.cpp).
void max_pool_2x2_avx512(const float* in, float* out, std::int64_t w, std::int64_t ow, std::int64_t pairs);
void max_pool_2x2_avx512(const std::uint16_t* in, float* out, std::int64_t w, std::int64_t ow, std::int64_t pairs);

// gin (2 pairs w values, laid out as in): each window's gradient g to its first NaN, else its first
// maximum in reading order, 0 to the other three and to a last column that is in no window.
void max_pool_2x2_backward_avx512(const float* in, const float* g, float* gin, std::int64_t w, std::int64_t ow,
                                  std::int64_t pairs);
void max_pool_2x2_backward_avx512(const std::uint16_t* in, const std::uint16_t* g, float* gin, std::int64_t w,
                                  std::int64_t ow, std::int64_t pairs);

}  // namespace mantissa::detail
