// The common shape of mantissa's small number types: raw bits, built from fp32 by rounding to nearest
// even, read back as fp32 exactly. Each type (fp16, bf16, e4m3, e5m2) names its Format and its storage.
#pragma once

#include <cstdint>

#include "mantissa/numeric/convert.h"

namespace mantissa {

template <class Bits, Format (*FormatOf)()>
struct PackedFloat {
  using bits_type = Bits;
  static constexpr Format format() { return FormatOf(); }

  Bits bits = 0;

  constexpr PackedFloat() = default;
  explicit PackedFloat(float x) : bits(static_cast<Bits>(encode(format(), x))) {}
  PackedFloat(float x, const CastOptions& options, std::uint64_t index = 0)
      : bits(static_cast<Bits>(encode(format(), x, options, index))) {}

  static constexpr PackedFloat from_bits(Bits b) {
    PackedFloat p;
    p.bits = b;
    return p;
  }
  explicit operator float() const { return decode(format(), bits); }
  float to_float() const { return decode(format(), bits); }

  // Bitwise identity (so NaN == NaN here, and +0 != -0): what storage and tests compare.
  friend constexpr bool operator==(PackedFloat, PackedFloat) = default;
};

}  // namespace mantissa
