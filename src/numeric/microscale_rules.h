// The block scale rules of the microscaled formats (mantissa/numeric/microscale.h), written once for the
// CPU's quantizer (microscale.cpp) and the GPU's (backend/cuda/cuda_fp8.cu): from a block's amax, the
// scale code it stores and the factor its values are multiplied by before rounding. They follow
// torchao's reference quantizers operation for operation in f32, so the codes agree bit for bit; and for
// NVFP4 also Transformer Engine's (the te rule).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "encode_rules.h"
#include "host_device.h"

namespace mantissa::detail {

struct BlockScale {
  float multiply = 1;
  std::uint8_t code = 0;
};

// What the rules need of the element format: its largest value, that value's floor(log2) (the "emax"
// OCP MX subtracts: e4m3 8, e5m2 15, e2m1 2), and its mantissa width.
struct ElementRule {
  float top;
  int emax;
  int man_bits;
};

namespace {

MANTISSA_HOST_DEVICE inline std::uint32_t f32_bits(float x) { return std::bit_cast<std::uint32_t>(x); }
MANTISSA_HOST_DEVICE inline float f32_of(std::uint32_t b) { return std::bit_cast<float>(b); }
MANTISSA_HOST_DEVICE inline bool is_nan(float x) { return (f32_bits(x) & 0x7fffffffU) > 0x7f800000U; }

// 2^k for k in -127..127, exactly (2^-127 is an f32 subnormal).
MANTISSA_HOST_DEVICE inline float pow2(int k) {
  return k == -127 ? f32_of(0x00400000U) : f32_of(static_cast<std::uint32_t>(k + 127) << 23);
}

// ceil(log2 d) for a finite d > 0, exactly (from the bits, not from a rounded logarithm).
MANTISSA_HOST_DEVICE inline int ceil_log2(float d) {
  const std::uint32_t b = f32_bits(d);
  const std::uint32_t field = b >> 23, mant = b & 0x7fffffU;
  if (field > 0) return static_cast<int>(field) - 127 + (mant != 0 ? 1 : 0);
  int top = 31;  // a subnormal: mant * 2^-149
  while (((mant >> top) & 1U) == 0) --top;
  return top - 149 + (mant != (1U << top) ? 1 : 0);
}

// E8M0 scales, floor and even rules (torchao's to_mx): the exponent field of the (rounded) amax less the
// element's emax, clamped to E8M0's range, 0xFF for a NaN amax; the values divided by the scale, which
// is held at least at f32's smallest normal. (torchao divides by the power of 2; multiplying by its
// reciprocal, which f32 holds exactly, gives the same correctly rounded results.)
MANTISSA_HOST_DEVICE inline BlockScale e8m0_floor(float amax, bool even, const ElementRule& e) {
  float m = amax;
  if (even && !is_nan(m)) {
    const std::uint32_t add = 1U << (23 - e.man_bits - 1);
    m = f32_of((f32_bits(m) + add) & 0xff800000U);
  }
  const int extracted = static_cast<int>((f32_bits(m) >> 23) & 0xffU) - 127;
  const int unbiased = std::clamp(extracted - e.emax, -127, 128);
  const auto code = static_cast<std::uint8_t>(is_nan(m) ? 255 : unbiased + 127);
  const float scale = std::max(f32_of(std::uint32_t{code} << 23), f32_of(0x00800000U));
  return {1.0f / scale, code};
}

// E8M0 scales, rceil rule (torchao's _to_mx_rceil, after Transformer Engine): the amax over the
// element's largest, rounded up to a power of 2; the values multiplied by its reciprocal (1 where the
// scale is 2^-127, as TE's exp2f_rcp has it).
MANTISSA_HOST_DEVICE inline BlockScale e8m0_rceil(float amax, const ElementRule& e) {
  const float descale = amax / e.top;
  std::uint8_t code;
  if (is_nan(descale)) {
    code = 255;
  } else if ((f32_bits(descale) & 0x7fffffffU) == 0x7f800000U) {
    code = 254;
  } else {
    const int x = descale == 0 ? -127 : std::clamp(ceil_log2(descale), -127, 127);
    code = static_cast<std::uint8_t>(x + 127);
  }
  float rcp;
  if (code == 255) {
    rcp = descale;
  } else if (code == 254) {
    rcp = pow2(-127);
  } else {
    rcp = code == 0 ? 1.0f : pow2(127 - code);
  }
  return {rcp, code};
}

// E4M3 scales under the tensor scale (torchao's nvfp4_quantize with a per-tensor scale): the block's
// amax over the element's largest, over the tensor scale, clamped to [2^-6, 448] (torchao's clamp) and
// rounded to e4m3; the values multiplied by (1 / tensor scale) / that.
MANTISSA_HOST_DEVICE inline BlockScale e4m3_block_scale(float amax, float tensor_scale, const ElementRule& e,
                                                        const EncodeParams& e4m3, const DecodeParams& e4m3_decode) {
  const float block = amax / e.top;
  const float scaled = block / tensor_scale;
  const float clamped = is_nan(scaled) ? scaled : std::clamp(scaled, 0.015625f, 448.0f);
  const auto code = static_cast<std::uint8_t>(encode_bits(e4m3, f32_bits(clamped), 0));
  return {(1.0f / tensor_scale) / f32_of(decode_bits(e4m3_decode, code)), code};
}

// NVFP4's tensor scale: torchao's amax / (448 * 6); a tensor of zeros gets 1, as Transformer Engine
// gives it (0 would make every block scale 0 / 0).
MANTISSA_HOST_DEVICE inline float nvfp4_tensor_scale(float amax) { return amax == 0 ? 1.0f : amax / (448.0f * 6.0f); }

// NVFP4 as Transformer Engine computes it (reference_nvfp4.py's NVFP4QuantizerRef, the kernel's default
// path), operation for operation in f32. The tensor's encode scale: (448 * 6) / amax, at most f32's
// largest (a tensor of zeros), 1 where it is 0 (an inf in the tensor); NaN stays NaN. (A min written out:
// fminf would drop the NaN, as torch.min does not.)
MANTISSA_HOST_DEVICE inline float te_nvfp4_encode(float amax) {
  const float limit = f32_of(0x7f7fffffU);
  float e = (448.0f * 6.0f) / amax;
  e = limit < e ? limit : e;
  return e == 0 ? 1.0f : e;
}
// The tensor scale a value's code and block scale are multiplied by: 1 / the encode scale.
MANTISSA_HOST_DEVICE inline float te_nvfp4_tensor_scale(float amax) { return 1.0f / te_nvfp4_encode(amax); }
// A block's E4M3 scale: amax x (encode x f32(1 / largest element)), clamped to 448 only (a scale below
// E4M3's smallest normal, or 0, stays: TE has no lower clamp), rounded to e4m3; the values multiplied by
// 1 / (scale x tensor scale), at most f32's largest (a zero scale: the block's values were all 0, or so
// small that their scale rounded to 0).
MANTISSA_HOST_DEVICE inline BlockScale te_e4m3_block_scale(float amax, float tensor_amax, const ElementRule& e,
                                                           const EncodeParams& e4m3, const DecodeParams& e4m3_decode) {
  const float limit = f32_of(0x7f7fffffU);
  const float encode = te_nvfp4_encode(tensor_amax);
  const float decode = 1.0f / encode;
  float scale = amax * (encode * (1.0f / e.top));
  scale = limit < scale ? limit : scale;
  scale = 448.0f < scale ? 448.0f : scale;  // (NaN stays NaN)
  // A NaN scale (a NaN in the block or the tensor) is written 0xFF, as TE's reference writes it on the CPU
  // (PyTorch's cast keeps the NaN's sign, set by the time it gets there); either is NaN in E4M3.
  const auto code = is_nan(scale) ? std::uint8_t{0xff} : static_cast<std::uint8_t>(encode_bits(e4m3, f32_bits(scale), 0));
  const float multiply = 1.0f / (f32_of(decode_bits(e4m3_decode, code)) * decode);
  return {limit < multiply ? limit : multiply, code};
}

// An E8M0 scale's value: 2^(bits - 127), NaN for 0xFF.
MANTISSA_HOST_DEVICE inline float e8m0_value(std::uint8_t bits) { return bits == 255 ? f32_of(0x7fc00000U) : pow2(bits - 127); }

}  // namespace
}  // namespace mantissa::detail
