// The fp32 -> format rounding rule and the format -> fp32 decoding rule, for every format, written once.
//
// The rule works on the fp32 bit pattern with integer arithmetic only, in a branch-light form that the
// AVX-512 kernel (bulk_avx512.cpp) follows step by step, so that both give the same bits. A value is
// sig * 2^(lsb exponent); it is rounded at the quantum of the target format at that magnitude,
// 2^(max(exponent, emin) - M), and the rounded count of quanta added to the exponent field gives the
// pattern directly (a carry out of the mantissa moves into the exponent by itself, subnormals included).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "mantissa/numeric/format.h"
#include "mantissa/numeric/rounding.h"

namespace mantissa::detail {

// Everything the rule needs about a format and the options, computed once per call, not per element.
struct EncodeParams {
  std::uint32_t man_bits;     // M
  std::int32_t emin;          // exponent of the smallest normal
  std::uint32_t sign_shift;   // E + M: where the sign goes
  std::uint32_t max_finite;   // magnitude pattern of the largest finite value
  std::uint32_t on_overflow;  // magnitude pattern for finite values past the range (inf, NaN or max)
  std::uint32_t on_inf;       // magnitude pattern for an infinite input (inf, NaN or max)
  std::uint32_t quiet_nan;    // magnitude pattern of the quiet NaN the payload is merged into
  std::uint32_t payload_shift;  // fp32 mantissa >> this is the NaN payload kept (32: none kept)
  Rounding rounding;
};

inline EncodeParams make_encode_params(Format f, const CastOptions& o) {
  EncodeParams p{};
  p.man_bits = static_cast<std::uint32_t>(f.man_bits());
  p.emin = f.min_exponent();
  p.sign_shift = static_cast<std::uint32_t>(f.exp_bits() + f.man_bits());
  p.max_finite = f.max_finite_bits();
  const std::uint32_t not_finite = f.has_inf() ? f.inf_bits() : f.nan_bits();
  p.on_overflow = o.saturate ? p.max_finite : not_finite;
  p.on_inf = p.on_overflow;
  p.quiet_nan = f.nan_bits();
  p.payload_shift = f.has_inf() ? static_cast<std::uint32_t>(23 - f.man_bits()) : 32;
  p.rounding = o.rounding;
  return p;
}

// Counter-based random bits: a bijective 32-bit mixer (lowbias32 constants) applied twice, keyed by the
// seed and the high half of the index. Depends on (seed, index) alone.
inline std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The key for indices that share their high 32 bits; kernels compute it once per 2^32 elements.
struct StochasticKey {
  std::uint32_t k0, k1;
};

inline StochasticKey stochastic_key(std::uint64_t seed, std::uint32_t index_high) {
  const std::uint64_t h = splitmix64(seed ^ splitmix64(index_high));
  return {static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32)};
}

inline std::uint32_t random_bits(StochasticKey key, std::uint32_t index_low) {
  return mix32(mix32(index_low ^ key.k0) + key.k1);
}

// Rounds the fp32 pattern x; `random` is used by stochastic rounding only.
inline std::uint32_t encode_bits(const EncodeParams& p, std::uint32_t x, std::uint32_t random) {
  const std::uint32_t sign = (x >> 31) << p.sign_shift;
  const std::uint32_t a = x & 0x7fffffffU;
  const std::uint32_t e32 = a >> 23;
  if (e32 == 255) {
    if (a == 0x7f800000U) return sign | p.on_inf;
    const std::uint32_t payload = p.payload_shift >= 32 ? 0 : (a & 0x7fffffU) >> p.payload_shift;
    return sign | p.quiet_nan | payload;
  }
  // a = sig * 2^(lsb - 150) with lsb = max(e32, 1); its exponent (for normals) is e32 - 127.
  const std::uint32_t sig = e32 != 0 ? (a & 0x7fffffU) | 0x800000U : a;
  const std::int32_t eeff = std::max(static_cast<std::int32_t>(e32) - 127, p.emin);
  // Bits of sig below the target quantum: always >= 0 since emin >= -126 and M <= 23.
  const std::uint32_t shift = static_cast<std::uint32_t>(
      eeff - static_cast<std::int32_t>(p.man_bits) + 150 - std::max<std::int32_t>(e32, 1));

  // The pattern is exponent_part + the value in quanta at that exponent, rounded.
  const std::uint32_t exponent_part = static_cast<std::uint32_t>(eeff - p.emin) << p.man_bits;
  std::uint32_t q;
  switch (p.rounding) {
    case Rounding::nearest_even: {
      // Doubling sig makes the half-quantum an integer even when shift is 0; past 27 the result is 0.
      // A tie goes to the even bit pattern: the even mantissa, or for eXm0 the even exponent field.
      const std::uint32_t s = std::min(shift + 1, 27U);
      const std::uint32_t sig2 = sig << 1;
      const std::uint32_t half_minus_one = ((1U << s) - 1) >> 1;
      const std::uint32_t odd = ((sig2 >> s) + exponent_part) & 1U;
      q = (sig2 + half_minus_one + odd) >> s;
      break;
    }
    case Rounding::toward_zero:
      q = sig >> std::min(shift, 31U);
      break;
    case Rounding::stochastic: {
      // Up with probability rem / 2^shift, exactly while shift <= 32 (every case but values far below
      // the smallest subnormal, where the error is under 2^-32).
      const std::uint32_t trunc = shift >= 32 ? 0 : sig >> shift;
      const std::uint32_t rem = shift >= 32 ? sig : sig & ((1U << shift) - 1);
      const std::uint32_t threshold = shift == 0 ? 0 : shift <= 32 ? random >> (32 - shift) : random;
      const std::uint32_t limit = shift <= 32 ? rem : shift - 32 >= 32 ? 0 : rem >> (shift - 32);
      q = trunc + (threshold < limit ? 1U : 0U);
      break;
    }
    default:
      q = 0;
  }
  std::uint32_t bits = exponent_part + q;
  if (bits > p.max_finite) {
    bits = p.rounding == Rounding::toward_zero ? p.max_finite : p.on_overflow;
  }
  return sign | bits;
}

// Everything decoding needs about a format.
struct DecodeParams {
  std::uint32_t man_bits, sign_shift, magnitude_mask, exp_field_max;
  std::int32_t bias, emin;
  bool ieee;
};

inline DecodeParams make_decode_params(Format f) {
  return {static_cast<std::uint32_t>(f.man_bits()),
          static_cast<std::uint32_t>(f.exp_bits() + f.man_bits()),
          f.magnitude_mask(),
          (1U << f.exp_bits()) - 1,
          f.bias(),
          f.min_exponent(),
          f.has_inf()};
}

inline std::uint32_t decode_bits(const DecodeParams& p, std::uint32_t bits) {
  const std::uint32_t sign = ((bits >> p.sign_shift) & 1U) << 31;
  const std::uint32_t mag = bits & p.magnitude_mask;
  const std::uint32_t e = mag >> p.man_bits;
  const std::uint32_t m = mag & ((1U << p.man_bits) - 1);
  if (p.ieee && e == p.exp_field_max) {
    return m == 0 ? sign | 0x7f800000U : sign | 0x7fc00000U | (m << (23 - p.man_bits));
  }
  if (!p.ieee && mag == p.magnitude_mask) return sign | 0x7fc00000U;
  if (e == 0) {
    // A subnormal of the format: m quanta of 2^(emin - M), exact in fp32 (perhaps as an fp32 subnormal).
    const float v = std::ldexp(static_cast<float>(m), p.emin - static_cast<std::int32_t>(p.man_bits));
    return sign | std::bit_cast<std::uint32_t>(v);
  }
  const std::uint32_t e32 = static_cast<std::uint32_t>(static_cast<std::int32_t>(e) - p.bias + 127);
  return sign | (e32 << 23) | (m << (23 - p.man_bits));
}

}  // namespace mantissa::detail
