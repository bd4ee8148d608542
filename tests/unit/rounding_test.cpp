// Rounding against the reference written from the definition (reference_format.h): at every boundary
// between neighbouring values (exact ties, one fp32 step either side of them, the subnormal and
// overflow boundaries), and on 10^6 random fp32 values per format.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "mantissa/numeric/convert.h"
#include "test_support.h"

namespace mantissa {
namespace {

using testing::RefRounding;

struct Mode {
  Rounding rounding;
  RefRounding ref;
  bool saturate;
};
constexpr Mode kModes[] = {{Rounding::nearest_even, RefRounding::nearest_even, false},
                           {Rounding::nearest_even, RefRounding::nearest_even, true},
                           {Rounding::toward_zero, RefRounding::toward_zero, false},
                           {Rounding::toward_zero, RefRounding::toward_zero, true}};

std::string describe(Format f, float x, const Mode& m) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s x=%a (%.9g) %s%s", f.name().c_str(), static_cast<double>(x),
                static_cast<double>(x), std::string(rounding_name(m.rounding)).c_str(),
                m.saturate ? " saturate" : "");
  return buf;
}

void expect_like_reference(const testing::Reference& ref, Format f, float x) {
  for (const Mode& m : kModes) {
    for (float v : {x, -x}) {
      const std::uint32_t got = encode(f, v, {m.rounding, m.saturate, 0});
      if (std::isnan(v)) {
        ASSERT_TRUE(std::isnan(decode(f, got))) << describe(f, v, m);
        continue;
      }
      ASSERT_EQ(got, ref.round(v, m.ref, m.saturate)) << describe(f, v, m);
    }
  }
}

class Rounds : public ::testing::TestWithParam<Format> {};

TEST_P(Rounds, EveryBoundaryBetweenNeighbours) {
  const Format f = GetParam();
  const testing::Reference ref(testing::ref_of(f));
  const testing::RefFormat& r = ref.format();
  // Every pair for formats of up to 16 bits; for wider ones, pairs spread over the whole range.
  const std::uint32_t last = r.max_finite();  // the pair (max, max + 1) is the overflow boundary
  const std::uint32_t step = f.bits() <= 16 ? 1 : std::max<std::uint32_t>(1, last / 200000);
  for (std::uint32_t lo = 0; lo <= last; lo += step) {
    const double a = r.formula(lo);
    const double b = r.formula(lo + 1);  // past max this is the value the next exponent would have
    const auto mid = static_cast<float>((a + b) / 2);
    if (static_cast<double>(mid) != (a + b) / 2) continue;  // tie not representable in fp32 (M = 23)
    if (std::isinf(mid)) continue;
    const float points[] = {static_cast<float>(a), mid, std::nextafter(mid, 0.0f),
                            std::nextafter(mid, std::numeric_limits<float>::infinity())};
    for (float x : points) expect_like_reference(ref, f, x);
  }
  // Far past the range, and the special values.
  for (float x : {std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 0.0f,
                  std::numeric_limits<float>::quiet_NaN()}) {
    expect_like_reference(ref, f, x);
  }
}

TEST_P(Rounds, AMillionRandomValues) {
  MANTISSA_TRACE_SEED();
  const Format f = GetParam();
  const testing::Reference ref(testing::ref_of(f));
  const auto values = testing::sample_fp32(f, 1'000'000, testing::test_seed() ^ f.bits());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float x = values[i];
    const Mode& m = kModes[i % 4];
    const std::uint32_t got = encode(f, x, {m.rounding, m.saturate, 0});
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(decode(f, got))) << describe(f, x, m);
    } else {
      ASSERT_EQ(got, ref.round(x, m.ref, m.saturate)) << describe(f, x, m);
    }
  }
}

TEST(RoundingExamples, WellKnownCases) {
  // fp16: ties to even at 1 + 2^-11 (down) and 1 + 3*2^-11 (up); the overflow threshold 65520.
  EXPECT_EQ(encode(Format::fp16(), 1.0f + std::ldexp(1.0f, -11)), 0x3c00U);
  EXPECT_EQ(encode(Format::fp16(), 1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02U);
  EXPECT_EQ(encode(Format::fp16(), 65519.0f), 0x7bffU);
  EXPECT_EQ(encode(Format::fp16(), 65520.0f), 0x7c00U);
  EXPECT_EQ(encode(Format::fp16(), 65520.0f, {.saturate = true}), 0x7bffU);
  EXPECT_EQ(encode(Format::fp16(), 1e6f, {.rounding = Rounding::toward_zero}), 0x7bffU);
  // Half the smallest subnormal is a tie between 0 and it: even is 0; a hair above rounds up.
  EXPECT_EQ(encode(Format::fp16(), std::ldexp(1.0f, -25)), 0x0000U);
  EXPECT_EQ(encode(Format::fp16(), std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001U);
  EXPECT_EQ(encode(Format::fp16(), -std::ldexp(1.0f, -30)), 0x8000U);  // underflow keeps the sign
  // e4m3: 464 is the tie between 448 (even) and 480 (the NaN pattern): 448. Above it: NaN or 448.
  EXPECT_EQ(encode(Format::e4m3(), 464.0f), 0x7eU);
  EXPECT_EQ(encode(Format::e4m3(), 465.0f), 0x7fU);
  EXPECT_EQ(encode(Format::e4m3(), 465.0f, {.saturate = true}), 0x7eU);
  EXPECT_EQ(encode(Format::e4m3(), -std::numeric_limits<float>::infinity()), 0xffU);
  // e5m2: 61440 is the tie between 57344 (odd mantissa) and infinity: infinity.
  EXPECT_EQ(encode(Format::e5m2(), 61440.0f), 0x7cU);
  EXPECT_EQ(encode(Format::e5m2(), 61439.0f), 0x7bU);
  // bf16 keeps fp32's subnormals: the smallest fp32 normal and a subnormal in between.
  EXPECT_EQ(encode(Format::bf16(), std::numeric_limits<float>::min()), 0x0080U);
  EXPECT_EQ(encode(Format::bf16(), std::bit_cast<float>(0x00018000U)), 0x0002U);  // tie, to even
}

INSTANTIATE_TEST_SUITE_P(Formats, Rounds, ::testing::ValuesIn(testing::formats_under_test()),
                         testing::format_label);

}  // namespace
}  // namespace mantissa
