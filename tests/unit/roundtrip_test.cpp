// Exhaustive over every bit pattern of the formats up to 16 bits (random ones beyond): decoding gives the value the
// definition gives, and encoding that value gives the same bits back (NaNs as NaN).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "mantissa/numeric/convert.h"
#include "test_support.h"

namespace mantissa {
namespace {

using testing::RefFormat;

class EveryPattern : public ::testing::TestWithParam<Format> {};

// Every pattern of formats up to 16 bits; 2^20 random patterns of the wider ones.
std::vector<std::uint32_t> patterns_of(Format f) {
  std::vector<std::uint32_t> v;
  if (f.bits() <= 16) {
    for (std::uint32_t b = 0; b < (std::uint32_t{1} << f.bits()); ++b) v.push_back(b);
    return v;
  }
  std::mt19937 rng(static_cast<std::uint32_t>(testing::test_seed()));
  for (int i = 0; i < (1 << 20); ++i) v.push_back(static_cast<std::uint32_t>(rng()) & (f.sign_bit() | f.magnitude_mask()));
  return v;
}

TEST_P(EveryPattern, DecodeIsExactAndEncodeGivesTheBitsBack) {
  MANTISSA_TRACE_SEED();
  const Format f = GetParam();
  const RefFormat ref = testing::ref_of(f);
  for (std::uint32_t bits : patterns_of(f)) {
    const float x = decode(f, bits);
    const double expected = ref.decode(bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(x)) << f.name() << " bits " << bits;
      ASSERT_EQ(std::signbit(x), (bits & f.sign_bit()) != 0);
      const std::uint32_t again = encode(f, x);
      ASSERT_TRUE(std::isnan(ref.decode(again))) << f.name() << " bits " << bits;
      ASSERT_EQ(again & f.sign_bit(), bits & f.sign_bit());
      continue;
    }
    ASSERT_EQ(static_cast<double>(x), expected) << f.name() << " bits " << bits;
    ASSERT_EQ(std::signbit(x), std::signbit(expected)) << f.name() << " bits " << bits;  // -0 too
    for (Rounding r : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
      for (bool saturate : {false, true}) {
        if (saturate && std::isinf(x)) continue;  // saturation turns infinity into the max, by design
        ASSERT_EQ(encode(f, x, {r, saturate, 7}, bits), bits)
            << f.name() << " bits " << bits << " " << rounding_name(r) << " saturate " << saturate;
      }
    }
  }
}

TEST_P(EveryPattern, NanPayloadIsKeptAndComesBackQuiet) {
  const Format f = GetParam();
  const float signalling = std::bit_cast<float>(0xff800001U);  // -sNaN, lowest payload bit
  const float payload = std::bit_cast<float>(0x7fd5555U << 4);  // a quiet NaN with a pattern
  // The payload's top bits are kept (only fp32-wide mantissas keep its lowest bit); the NaN is quiet.
  const std::uint32_t low_payload = f.has_inf() ? 1U >> (23 - f.man_bits()) : 0;
  EXPECT_EQ(encode(f, signalling), f.sign_bit() | f.nan_bits() | low_payload);
  const std::uint32_t kept = encode(f, payload);
  EXPECT_TRUE(std::isnan(decode(f, kept)));
  if (f.has_inf()) {
    const std::uint32_t mantissa_mask = (std::uint32_t{1} << f.man_bits()) - 1;
    EXPECT_EQ(kept & mantissa_mask, ((0x7fd55550U & 0x7fffffU) >> (23 - f.man_bits())) | (f.nan_bits() & mantissa_mask));
  }
  EXPECT_EQ(std::bit_cast<std::uint32_t>(decode(f, f.nan_bits())) & 0x7fc00000U, 0x7fc00000U);
}

INSTANTIATE_TEST_SUITE_P(Formats, EveryPattern, ::testing::ValuesIn(testing::formats_under_test()),
                         testing::format_label);

}  // namespace
}  // namespace mantissa
