// The rules of bf16 and f16 written out (encode_rules.h): the NaN rules (bf16_nan_of, f16_nan_of,
// f32_nan_of_bf16, f32_nan_of_f16), which the GPU's loads and stores use beside the hardware's
// conversions, and the whole f32 -> bf16 rounding (bf16_bits_of), which the CPU's loops use where they
// round as they store: the same bits as the general rule (encode_bits, decode_bits) on every NaN of
// either format and on every f32 NaN, and on every f32 whose rounding to bf16 differs in any way.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "../../src/numeric/encode_rules.h"

namespace mantissa::detail {
namespace {

TEST(HalfNanRules, EveryF32NanEncodesAsTheGeneralRuleSays) {
  const EncodeParams bf16 = make_encode_params(Format::bf16(), CastOptions{});
  const EncodeParams f16 = make_encode_params(Format::fp16(), CastOptions{});
  for (std::uint32_t sign : {0U, 0x80000000U}) {
    for (std::uint32_t payload = 1; payload < (1U << 23); ++payload) {  // every NaN, quiet or signalling
      const std::uint32_t x = sign | 0x7f800000U | payload;
      ASSERT_EQ(bf16_nan_of(x), encode_bits(bf16, x, 0)) << std::hex << x;
      ASSERT_EQ(f16_nan_of(x), encode_bits(f16, x, 0)) << std::hex << x;
    }
  }
}

TEST(HalfNanRules, EveryHalfNanDecodesAsTheGeneralRuleSays) {
  const DecodeParams bf16 = make_decode_params(Format::bf16());
  const DecodeParams f16 = make_decode_params(Format::fp16());
  int nans = 0;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const auto bits = static_cast<std::uint16_t>(p);
    if ((p & 0x7fffU) > 0x7f80U) {
      ASSERT_EQ(f32_nan_of_bf16(bits), decode_bits(bf16, p)) << std::hex << p;
      ++nans;
    }
    if ((p & 0x7fffU) > 0x7c00U) {
      ASSERT_EQ(f32_nan_of_f16(bits), decode_bits(f16, p)) << std::hex << p;
      ++nans;
    }
  }
  EXPECT_EQ(nans, 2 * 127 + 2 * 1023);
}

// Rounding to bf16 keeps the high half and reads only bit 16 (the kept part's lowest), bit 15 (the half)
// and whether bits 0-14 are zero: every high half with each low half that makes one case is every case.
TEST(HalfNanRules, Bf16RoundingWrittenOutIsTheGeneralRule) {
  const EncodeParams bf16 = make_encode_params(Format::bf16(), CastOptions{});
  for (std::uint32_t high = 0; high < 65536; ++high) {
    for (std::uint32_t low : {0x0000U, 0x0001U, 0x4000U, 0x7fffU, 0x8000U, 0x8001U, 0xc000U, 0xffffU}) {
      const std::uint32_t x = high << 16 | low;
      ASSERT_EQ(bf16_bits_of(std::bit_cast<float>(x)), encode_bits(bf16, x, 0)) << std::hex << x;
    }
  }
}

}  // namespace
}  // namespace mantissa::detail
