// bfloat16: fp32's 8 exponent bits with 7 mantissa bits. fp32's range, so it rarely needs loss scaling.
#pragma once

#include "mantissa/numeric/packed_float.h"

namespace mantissa {

using bf16 = PackedFloat<std::uint16_t, &Format::bf16>;

}  // namespace mantissa
