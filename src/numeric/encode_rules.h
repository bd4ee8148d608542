// The fp32 -> format rounding rule and the format -> fp32 decoding rule, for every format, written once.
//
// The rule works on the fp32 bit pattern with integer arithmetic only, in a branch-free form that the
// AVX-512 kernel (bulk_avx512.cpp) follows step by step, so that both give the same bits. A value is
// sig * 2^(lsb exponent); it is rounded at the quantum of the target format at that magnitude,
// 2^(max(exponent, emin) - M), and the rounded count of quanta added to the exponent field gives the
// pattern directly (a carry out of the mantissa moves into the exponent by itself, subnormals included).
// The CUDA backend compiles the same functions for the GPU (MANTISSA_HOST_DEVICE), so its casts give
// these bits too.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "mantissa/numeric/format.h"
#include "host_device.h"
#include "mantissa/numeric/rounding.h"

namespace mantissa::detail {

// Everything the rule needs about a format and the options, computed once per call, not per element.
struct EncodeParams {
  std::uint32_t man_bits;     // M
  std::int32_t emin;          // exponent of the smallest normal
  std::uint32_t sign_shift;   // E + M: where the sign goes
  std::uint32_t max_finite;   // magnitude pattern of the largest finite value
  // Magnitude pattern for infinite inputs, and for finite ones past the range unless rounding toward
  // zero: inf, or NaN in formats without infinity, or the max finite when saturating.
  std::uint32_t on_overflow;
  std::uint32_t quiet_nan;    // magnitude pattern of the quiet NaN the payload is merged into
  std::uint32_t payload_shift;  // (fp32 mantissa >> payload_shift) & payload_mask: the NaN payload kept
  std::uint32_t payload_mask;   // 0 for formats with a single NaN
  Rounding rounding;
};

// The key for indices that share their high 32 bits; kernels compute it once per 2^32 elements.
struct StochasticKey {
  std::uint32_t k0, k1;
};

// Everything decoding needs about a format.
struct DecodeParams {
  std::uint32_t man_bits, sign_shift, magnitude_mask, exp_field_max;
  std::int32_t bias;
  // The value of one subnormal quantum, 2^(emin - M), for formats with fewer than 8 exponent bits,
  // whose subnormals are fp32 normals. With 8 exponent bits they are fp32 subnormals with the same
  // bits, taken as such: a product there would make fp32 denormals, slow on every lane computing it.
  float subnormal_scale;
  bool wide_exponent;
  bool ieee;
  bool has_nan;  // false: every pattern is a number (e2m1)
};

// The functions have internal linkage on purpose: this header is compiled into translation units with
// different instruction-set flags, and a shared (merged) copy could run AVX-512 code on a CPU without it.
namespace {

inline EncodeParams make_encode_params(Format f, const CastOptions& o) {
  EncodeParams p{};
  p.man_bits = static_cast<std::uint32_t>(f.man_bits());
  p.emin = f.min_exponent();
  p.sign_shift = static_cast<std::uint32_t>(f.exp_bits() + f.man_bits());
  p.max_finite = f.max_finite_bits();
  const std::uint32_t not_finite = f.has_inf() ? f.inf_bits() : f.nan_bits();
  p.on_overflow = o.saturate ? p.max_finite : not_finite;
  p.quiet_nan = f.nan_bits();
  p.payload_shift = static_cast<std::uint32_t>(23 - f.man_bits());
  p.payload_mask = f.has_inf() ? (std::uint32_t{1} << f.man_bits()) - 1 : 0;
  p.rounding = o.rounding;
  return p;
}

// Counter-based random bits: a bijective 32-bit mixer (lowbias32 constants) applied twice, keyed by the
// seed and the high half of the index. Depends on (seed, index) alone.
MANTISSA_HOST_DEVICE inline std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

MANTISSA_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

MANTISSA_HOST_DEVICE inline StochasticKey stochastic_key(std::uint64_t seed, std::uint32_t index_high) {
  const std::uint64_t h = splitmix64(seed ^ splitmix64(index_high));
  return {static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32)};
}

MANTISSA_HOST_DEVICE inline std::uint32_t random_bits(StochasticKey key, std::uint32_t index_low) {
  return mix32(mix32(index_low ^ key.k0) + key.k1);
}

// The pattern for an infinite or NaN fp32 magnitude a: NaN keeps the payload's top bits, made quiet.
MANTISSA_HOST_DEVICE inline std::uint32_t special_bits(const EncodeParams& p, std::uint32_t a) {
  const std::uint32_t nan = p.quiet_nan | ((a & 0x7fffffU) >> p.payload_shift & p.payload_mask);
  return a == 0x7f800000U ? p.on_overflow : nan;
}

// Rounds the fp32 pattern x under rounding R; `random` is used by stochastic rounding only. Written
// as selects without branches, so that loops over it vectorize.
template <Rounding R>
MANTISSA_HOST_DEVICE inline std::uint32_t encode_bits_as(const EncodeParams& p, std::uint32_t x, std::uint32_t random) {
  const std::uint32_t sign = (x >> 31) << p.sign_shift;
  const std::uint32_t a = x & 0x7fffffffU;
  const std::uint32_t e32 = a >> 23;
  // a = sig * 2^(lsb - 150) with lsb = max(e32, 1); its exponent (for normals) is e32 - 127.
  const std::uint32_t sig = e32 != 0 ? (a & 0x7fffffU) | 0x800000U : a;
  const std::int32_t eeff = std::max(static_cast<std::int32_t>(e32) - 127, p.emin);
  // Bits of sig below the target quantum: always >= 0 since emin >= -126 and M <= 23.
  const std::uint32_t shift = static_cast<std::uint32_t>(
      eeff - static_cast<std::int32_t>(p.man_bits) + 150 - std::max<std::int32_t>(static_cast<std::int32_t>(e32), 1));

  // The pattern is exponent_part + the value in quanta at that exponent, rounded.
  const std::uint32_t exponent_part = static_cast<std::uint32_t>(eeff - p.emin) << p.man_bits;
  std::uint32_t q;
  if constexpr (R == Rounding::nearest_even) {
    // Doubling sig makes the half-quantum an integer even when shift is 0; past 27 the result is 0.
    // A tie goes to the even bit pattern: the even mantissa, or for eXm0 the even exponent field.
    const std::uint32_t s = std::min(shift + 1, 27U);
    const std::uint32_t sig2 = sig << 1;
    const std::uint32_t half_minus_one = ((1U << s) - 1) >> 1;
    const std::uint32_t odd = ((sig2 >> s) + exponent_part) & 1U;
    q = (sig2 + half_minus_one + odd) >> s;
  } else if constexpr (R == Rounding::toward_zero) {
    q = sig >> std::min(shift, 31U);
  } else {
    // Up with probability rem / 2^shift, exactly while shift <= 32 (every case but values far below
    // the smallest subnormal, where the error is under 2^-32).
    const std::uint32_t s = std::min(shift, 31U);
    const std::uint32_t trunc = shift >= 32 ? 0 : sig >> s;
    const std::uint32_t rem = shift >= 32 ? sig : sig & ((1U << s) - 1);
    const std::uint32_t threshold = shift == 0 ? 0 : shift <= 32 ? random >> ((32 - shift) & 31) : random;
    const std::uint32_t limit = shift <= 32 ? rem : shift >= 64 ? 0 : rem >> ((shift - 32) & 31);
    q = trunc + (threshold < limit ? 1U : 0U);
  }
  std::uint32_t bits = exponent_part + q;
  const std::uint32_t overflow = R == Rounding::toward_zero ? p.max_finite : p.on_overflow;
  bits = bits > p.max_finite ? overflow : bits;

  return sign | (e32 == 255 ? special_bits(p, a) : bits);
}

// Formats with fp32's 8 exponent bits (bf16, e8mY, M < 23), rounding to nearest even: their quantum is
// always 2^(23 - M) fp32 units, so kernels may round the fp32 pattern at that bit (encode_wide_nearest()
// in bulk_loops.h) and get the rule's bits.
MANTISSA_HOST_DEVICE inline bool wide_nearest(const EncodeParams& p) {
  return p.rounding == Rounding::nearest_even && p.emin == -126 && p.man_bits < 23;
}

MANTISSA_HOST_DEVICE inline std::uint32_t encode_bits(const EncodeParams& p, std::uint32_t x, std::uint32_t random) {
  switch (p.rounding) {
    case Rounding::nearest_even: return encode_bits_as<Rounding::nearest_even>(p, x, random);
    case Rounding::toward_zero: return encode_bits_as<Rounding::toward_zero>(p, x, random);
    case Rounding::stochastic: return encode_bits_as<Rounding::stochastic>(p, x, random);
  }
  return 0;
}

inline DecodeParams make_decode_params(Format f) {
  return {static_cast<std::uint32_t>(f.man_bits()),
          static_cast<std::uint32_t>(f.exp_bits() + f.man_bits()),
          f.magnitude_mask(),
          (1U << f.exp_bits()) - 1,
          f.bias(),
          f.exp_bits() == 8 ? 1.0f : std::ldexp(1.0f, f.min_exponent() - f.man_bits()),
          f.exp_bits() == 8,
          f.has_inf(),
          f.has_nan()};
}

// The fp32 pattern of a format's pattern; exact. Without branches, so that loops over it vectorize.
MANTISSA_HOST_DEVICE inline std::uint32_t decode_bits(const DecodeParams& p, std::uint32_t bits) {
  const std::uint32_t sign = ((bits >> p.sign_shift) & 1U) << 31;
  const std::uint32_t mag = bits & p.magnitude_mask;
  const std::uint32_t e = mag >> p.man_bits;
  const std::uint32_t m = mag & ((1U << p.man_bits) - 1);
  const std::uint32_t fraction = m << (23 - p.man_bits);
  // Normal: rebias the exponent. Subnormal: m quanta, exact in fp32 (perhaps as an fp32 subnormal).
  const std::uint32_t normal = static_cast<std::uint32_t>(static_cast<std::int32_t>(e) - p.bias + 127) << 23 | fraction;
  const std::uint32_t subnormal = p.wide_exponent ? fraction
                                                  : std::bit_cast<std::uint32_t>(static_cast<float>(m) * p.subnormal_scale);
  std::uint32_t out = e == 0 ? subnormal : normal;
  // Infinity, and NaN with its payload, made quiet.
  const std::uint32_t nan = 0x7fc00000U | fraction;
  const std::uint32_t ieee_special = m == 0 ? 0x7f800000U : nan;
  out = (p.ieee & (e == p.exp_field_max)) ? ieee_special : out;  // & not &&: no branch
  out = (!p.ieee & p.has_nan & (mag == p.magnitude_mask)) ? 0x7fc00000U : out;
  return sign | out;
}

// The rules above for NaN in bf16 and f16, written out (no parameters: the GPU's loads and stores take
// the hardware's conversions for every other value, and these for NaN; tests/unit/encode_rules_test.cpp
// checks them against encode_bits and decode_bits on every NaN). A NaN keeps its sign and its payload's
// top bits (bottom bits widening), made quiet.
MANTISSA_HOST_DEVICE inline std::uint16_t bf16_nan_of(std::uint32_t f32_nan) { return static_cast<std::uint16_t>((f32_nan >> 16) | 0x40U); }
MANTISSA_HOST_DEVICE inline std::uint16_t f16_nan_of(std::uint32_t f32_nan) {
  return static_cast<std::uint16_t>(((f32_nan >> 16) & 0x8000U) | 0x7e00U | ((f32_nan & 0x7fffffU) >> 13));
}
// f32 to bf16 by nearest even, the rule's bits for Format::bf16() written out for loops that round as
// they store (tests/unit/half_nan_rules_test.cpp checks every high half with each low half that decides
// a rounding): add 0x7fff plus the kept part's lowest bit and keep the top half, which carries into the
// exponent where it should (to inf past bf16's largest finite) and never into the sign; NaN by bf16_nan_of.
MANTISSA_HOST_DEVICE inline std::uint16_t bf16_bits_of(float v) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t rounded = (x + 0x7fffU + ((x >> 16) & 1U)) >> 16;
  return (x & 0x7fffffffU) > 0x7f800000U ? bf16_nan_of(x) : static_cast<std::uint16_t>(rounded);
}
MANTISSA_HOST_DEVICE inline std::uint32_t f32_nan_of_bf16(std::uint16_t nan) { return (std::uint32_t{nan} << 16) | 0x400000U; }
MANTISSA_HOST_DEVICE inline std::uint32_t f32_nan_of_f16(std::uint16_t nan) {
  return ((std::uint32_t{nan} & 0x8000U) << 16) | 0x7fc00000U | ((std::uint32_t{nan} & 0x3ffU) << 13);
}

}  // namespace
}  // namespace mantissa::detail
