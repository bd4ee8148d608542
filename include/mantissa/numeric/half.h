// IEEE 754 binary16: 5 exponent bits, 10 mantissa bits, max 65504. Needs loss scaling in training: its smallest normal is 6.1e-5.
#pragma once

#include "mantissa/numeric/packed_float.h"

namespace mantissa {

using fp16 = PackedFloat<std::uint16_t, &Format::fp16>;

}  // namespace mantissa
