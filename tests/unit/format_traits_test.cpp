// The traits table and the names: the numbers users compare formats by must be the published ones.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "mantissa/numeric/bfloat16.h"
#include "mantissa/numeric/float8.h"
#include "mantissa/numeric/format.h"
#include "mantissa/numeric/half.h"

namespace mantissa {
namespace {

TEST(FormatTraits, PublishedValuesOfTheNamedFormats) {
  const FormatTraits f32 = traits(Format::fp32());
  EXPECT_EQ(f32.bits, 32);
  EXPECT_EQ(f32.bias, 127);
  EXPECT_EQ(f32.max_finite, 3.4028234663852886e38);
  EXPECT_EQ(f32.min_normal, std::ldexp(1.0, -126));
  EXPECT_EQ(f32.min_subnormal, std::ldexp(1.0, -149));
  EXPECT_EQ(f32.epsilon, std::ldexp(1.0, -23));

  const FormatTraits h = traits(Format::fp16());
  EXPECT_EQ(h.bits, 16);
  EXPECT_EQ(h.bias, 15);
  EXPECT_EQ(h.max_finite, 65504.0);
  EXPECT_EQ(h.min_normal, std::ldexp(1.0, -14));
  EXPECT_EQ(h.min_subnormal, std::ldexp(1.0, -24));
  EXPECT_EQ(h.epsilon, std::ldexp(1.0, -10));
  EXPECT_TRUE(h.has_inf);

  const FormatTraits b = traits(Format::bf16());
  EXPECT_EQ(b.max_finite, 3.3895313892515355e38);
  EXPECT_EQ(b.min_normal, std::ldexp(1.0, -126));
  EXPECT_EQ(b.min_subnormal, std::ldexp(1.0, -133));
  EXPECT_EQ(b.epsilon, std::ldexp(1.0, -7));

  const FormatTraits e4 = traits(Format::e4m3());
  EXPECT_EQ(e4.bias, 7);
  EXPECT_EQ(e4.max_finite, 448.0);
  EXPECT_EQ(e4.min_normal, std::ldexp(1.0, -6));
  EXPECT_EQ(e4.min_subnormal, std::ldexp(1.0, -9));
  EXPECT_FALSE(e4.has_inf);
  EXPECT_EQ(e4.nan_encoding, "S.1111.111");

  const FormatTraits e5 = traits(Format::e5m2());
  EXPECT_EQ(e5.bias, 15);
  EXPECT_EQ(e5.max_finite, 57344.0);
  EXPECT_EQ(e5.min_normal, std::ldexp(1.0, -14));
  EXPECT_EQ(e5.min_subnormal, std::ldexp(1.0, -16));
  EXPECT_TRUE(e5.has_inf);
}

TEST(FormatTraits, DegenerateEmulatedFormatsSayWhatTheyLack) {
  // e1m2: the only exponent field above zero is infinity's, so there are subnormals only.
  const FormatTraits e1 = traits(Format::emulated(1, 2));
  EXPECT_TRUE(std::isnan(e1.min_normal));
  EXPECT_EQ(e1.max_finite, 1.5);
  EXPECT_EQ(e1.min_subnormal, 0.5);
  // e8m0: no mantissa, so no subnormals, and the all-ones exponent is NaN, not infinity.
  const FormatTraits e8 = traits(Format::emulated(8, 0));
  EXPECT_TRUE(std::isnan(e8.min_subnormal));
  EXPECT_FALSE(e8.has_inf);
  EXPECT_EQ(e8.max_finite, std::ldexp(1.0, 127));
}

TEST(FormatNames, ParseAndNameRoundTrip) {
  for (Format f : named_formats()) EXPECT_EQ(Format::parse(f.name()), f);
  EXPECT_EQ(Format::parse("e5m10"), Format::fp16());
  EXPECT_EQ(Format::parse("e8m7"), Format::bf16());
  EXPECT_EQ(Format::parse("e8m23"), Format::fp32());
  EXPECT_EQ(Format::parse("e5m2"), Format::emulated(5, 2));
  EXPECT_EQ(Format::parse("e4m3"), Format::e4m3());  // OCP's, not the IEEE-style emulated(4, 3)
  EXPECT_NE(Format::e4m3(), Format::emulated(4, 3));
  EXPECT_EQ(Format::parse("e3m4").name(), "e3m4");
  EXPECT_EQ(Format::parse("e3m4").storage_bytes(), 1);
  EXPECT_EQ(Format::parse("e5m20").storage_bytes(), 4);
}

TEST(FormatNames, BadNamesAreRejectedWithTheReason) {
  for (const char* bad : {"", "fp64", "e9m2", "e0m3", "e5m24", "e5", "em3", "e5m-1", "e5m2x", "E5M2"}) {
    EXPECT_THROW(Format::parse(bad), std::invalid_argument) << bad;
  }
  try {
    Format::parse("e9m2");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exponent bits must be 1 to 8"), std::string::npos);
  }
}

TEST(NumberTypes, HoldRawBitsAndConvertByNearestEven) {
  static_assert(sizeof(fp16) == 2 && sizeof(bf16) == 2 && sizeof(e4m3) == 1 && sizeof(e5m2) == 1);
  EXPECT_EQ(fp16(1.0f).bits, 0x3c00);
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(e4m3(448.0f).bits, 0x7e);
  EXPECT_EQ(e5m2(57344.0f).bits, 0x7b);
  EXPECT_EQ(static_cast<float>(fp16::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(bf16(3.14159265f)), 3.140625f);
  EXPECT_TRUE(std::isnan(static_cast<float>(e4m3(1000.0f))));  // no infinity: overflow is NaN
  EXPECT_EQ(e4m3(1000.0f, CastOptions{.saturate = true}).bits, 0x7e);
}

}  // namespace
}  // namespace mantissa
