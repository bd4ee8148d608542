// Reading and writing single elements of any dtype as double: the slow, exact path the reference
// backend, factories and tests use. Writing rounds to nearest even exactly (double -> f32 by rounding
// to odd, then to the format: correct because f32 carries at least two more bits than f16 or bf16).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "mantissa/core/dtype.h"
#include "mantissa/numeric/convert.h"

namespace mantissa::detail {

inline double load_element(DType t, const void* base, std::int64_t i) {
  switch (t) {
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16:
    case DType::bf16: return decode(format_of(t), static_cast<const std::uint16_t*>(base)[i]);
    case DType::e4m3:
    case DType::e5m2: return decode(format_of(t), static_cast<const std::uint8_t*>(base)[i]);
  }
  return 0;
}

// d rounded to f32 toward zero, with the last bit set when inexact ("round to odd").
inline float round_to_odd(double d) {
  if (std::isnan(d)) return static_cast<float>(d);
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d) return f;
  if (std::isinf(f) || std::fabs(static_cast<double>(f)) > std::fabs(d)) {
    f = std::nextafter(f, 0.0f);
  }
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1U);
}

inline void store_element(DType t, void* base, std::int64_t i, double v) {
  switch (t) {
    case DType::f64: static_cast<double*>(base)[i] = v; return;
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::f16:
    case DType::bf16:
      static_cast<std::uint16_t*>(base)[i] = static_cast<std::uint16_t>(encode(format_of(t), round_to_odd(v)));
      return;
    case DType::e4m3:
    case DType::e5m2:
      static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(encode(format_of(t), round_to_odd(v)));
      return;
  }
}

}  // namespace mantissa::detail
