// Scalar conversions between fp32 and any Format: the definition every bulk kernel must match bit for bit.
#pragma once

#include <cstdint>

#include "mantissa/numeric/format.h"
#include "mantissa/numeric/rounding.h"

namespace mantissa {

// Rounds x into `format` and returns its bit pattern (in the low format.bits() bits). `index` is the
// element's position, the counter stochastic rounding draws its random bits from.
std::uint32_t encode(Format format, float x, const CastOptions& options = {}, std::uint64_t index = 0);

// The exact fp32 value of a bit pattern. NaN keeps its sign and payload and comes back quiet.
float decode(Format format, std::uint32_t bits);

// decode(encode(x)): x rounded to the nearest value the format holds, as fp32.
float round_to(Format format, float x, const CastOptions& options = {}, std::uint64_t index = 0);

// The 32 random bits stochastic rounding uses for element `index` under `seed`.
std::uint32_t stochastic_bits(std::uint64_t seed, std::uint64_t index);

}  // namespace mantissa
