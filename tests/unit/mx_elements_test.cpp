// The OCP MX element formats without inf or NaN (FP6 E2M3 and E3M2, FP4 E2M1) against their definition
// in OCP Microscaling 1.0 (section 5.3.2), exhaustively: every code decodes to the value its bits
// define, and rounding to nearest even is checked against the nearest of every code, over f32 values
// on a stride through the whole range and every midpoint with its two f32 neighbours; past the largest
// value, and for inf and NaN (which these formats cannot hold), the largest finite value of the sign.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <vector>

#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/format.h"
#include "mantissa/numeric/microscale.h"

namespace mantissa {
namespace {

struct MxElement {
  Format format;
  int exp_bits, man_bits, bias;
  double max;  // OCP's table
  friend void PrintTo(const MxElement& e, std::ostream* os) { *os << e.format.name(); }
};

// Written out from the specification, not from Format: bits, bias and largest value.
const MxElement kElements[] = {
    {Format::e2m1(), 2, 1, 1, 6.0},
    {Format::e2m3(), 2, 3, 1, 7.5},
    {Format::e3m2(), 3, 2, 3, 28.0},
};

// A magnitude code's value by the definition: exponent field 0 is subnormal (2^(1 - bias) x 0.M),
// every other field normal (2^(E - bias) x 1.M); no field is reserved.
double defined_value(const MxElement& e, std::uint32_t magnitude) {
  const std::uint32_t m = magnitude & ((1U << e.man_bits) - 1), exp = magnitude >> e.man_bits;
  const double fraction = static_cast<double>(m) / (1 << e.man_bits);
  return exp == 0 ? std::ldexp(fraction, 1 - e.bias) : std::ldexp(1 + fraction, static_cast<int>(exp) - e.bias);
}

class MxElements : public ::testing::TestWithParam<MxElement> {};

TEST_P(MxElements, EveryCodeDecodesAsTheOcpDefinitionSays) {
  const MxElement& e = GetParam();
  const int bits = 1 + e.exp_bits + e.man_bits;
  EXPECT_EQ(e.format.bits(), bits);
  EXPECT_FALSE(e.format.has_nan());
  EXPECT_FALSE(e.format.has_inf());
  EXPECT_EQ(Format::parse(e.format.name()), e.format);
  EXPECT_EQ(traits(e.format).max_finite, e.max);
  const std::uint32_t sign = 1U << (bits - 1);
  for (std::uint32_t code = 0; code < (1U << bits); ++code) {
    const double want = (code & sign ? -1 : 1) * defined_value(e, code & (sign - 1));
    EXPECT_EQ(decode(e.format, code), want) << e.format.name() << " code " << code;
    EXPECT_EQ(std::signbit(decode(e.format, code)), (code & sign) != 0) << e.format.name() << " code " << code;
  }
  EXPECT_EQ(defined_value(e, sign - 1), e.max);
}

TEST_P(MxElements, EncodingRoundsToTheNearestCodeTiesToEvenAndSaturates) {
  const MxElement& e = GetParam();
  const int bits = 1 + e.exp_bits + e.man_bits;
  const std::uint32_t sign = 1U << (bits - 1);
  const auto nearest = [&](double a) {  // of the magnitudes, ties to the even code
    std::uint32_t best = 0;
    for (std::uint32_t m = 1; m < sign; ++m) {
      const double d = std::fabs(a - defined_value(e, m)), db = std::fabs(a - defined_value(e, best));
      if (d < db || (d == db && m % 2 == 0)) best = m;
    }
    return best;
  };
  std::vector<float> xs;
  const auto top = static_cast<float>(4 * e.max);
  for (std::uint32_t b = 0; b <= std::bit_cast<std::uint32_t>(top); b += 4099) xs.push_back(std::bit_cast<float>(b));
  for (std::uint32_t m = 0; m + 1 < sign; ++m) {
    const auto mid = static_cast<float>((defined_value(e, m) + defined_value(e, m + 1)) / 2);
    for (const float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, top)}) xs.push_back(v);
  }
  for (const float x : xs) {
    for (const float s : {x, -x}) {
      const std::uint32_t want = (std::signbit(s) ? sign : 0U) | nearest(std::fabs(static_cast<double>(s)));
      ASSERT_EQ(encode(e.format, s), want) << e.format.name() << " " << s;
    }
  }
  EXPECT_EQ(encode(e.format, std::numeric_limits<float>::infinity()), sign - 1);
  EXPECT_EQ(encode(e.format, -std::numeric_limits<float>::infinity()), 2 * sign - 1);
  EXPECT_EQ(encode(e.format, std::numeric_limits<float>::quiet_NaN()), sign - 1);
}

TEST_P(MxElements, AreBlockQuantizationElements) {
  const QuantSpec spec{.element = GetParam().format, .rule = ScaleRule::rceil};
  EXPECT_NO_THROW(spec.check());
  EXPECT_EQ(QuantSpec::parse(spec.str()), spec);
  // FP8's fit rule is for FP8's elements only.
  EXPECT_THROW((QuantSpec{.element = GetParam().format, .rule = ScaleRule::fit}.check()), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Ocp, MxElements, ::testing::ValuesIn(kElements),
                         [](const ::testing::TestParamInfo<MxElement>& p) { return p.param.format.name(); });

}  // namespace
}  // namespace mantissa
