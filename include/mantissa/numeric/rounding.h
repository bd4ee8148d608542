// How a value that a format cannot hold exactly is rounded, and what happens past its largest number.
#pragma once

#include <cstdint>
#include <string_view>

namespace mantissa {

enum class Rounding : std::uint8_t {
  nearest_even,  // to the nearest representable value, ties to the one with an even mantissa (default)
  stochastic,    // up with probability (x - down) / (up - down): unbiased in expectation
  toward_zero,   // truncate; never overflows to infinity (IEEE 754: overflow gives the largest finite)
};

struct CastOptions {
  Rounding rounding = Rounding::nearest_even;
  // Out-of-range values, infinities included, become the largest finite value of their sign instead of
  // infinity (or NaN, for formats without infinity). NaN stays NaN either way.
  bool saturate = false;
  // Stochastic rounding draws its random bits from (seed, element index) alone: reproducible, and the
  // same whatever the number of threads or the vector width.
  std::uint64_t seed = 0;
};

// "nearest", "stochastic", "zero"; throws std::invalid_argument for anything else.
Rounding parse_rounding(std::string_view name);
std::string_view rounding_name(Rounding rounding);

}  // namespace mantissa
