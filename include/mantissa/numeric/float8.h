// The two OCP 8-bit floating-point formats.
// e4m3 (OCP E4M3 "fn"): more precision, max 448, no infinity, S.1111.111 is NaN; for weights and
//   activations in the forward pass.
// e5m2: fp16's exponent range with 2 mantissa bits, IEEE-like with infinity, max 57344; for gradients.
#pragma once

#include "mantissa/numeric/packed_float.h"

namespace mantissa {

using e4m3 = PackedFloat<std::uint8_t, &Format::e4m3>;
using e5m2 = PackedFloat<std::uint8_t, &Format::e5m2>;

}  // namespace mantissa
