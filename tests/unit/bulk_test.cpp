// Every bulk kernel this CPU runs gives exactly the bits of the scalar encode()/decode(), for every
// format, rounding mode and saturation, on the same 10^6 values (NaNs and infinities included), on odd
// lengths and offsets, and on arrays large enough to be split across threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mantissa/numeric/bulk.h"
#include "mantissa/numeric/convert.h"
#include "test_support.h"

namespace mantissa {
namespace {

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (isa_supported(isa)) v.push_back(isa);
  }
  return v;
}

std::uint32_t element(const std::vector<std::uint8_t>& bytes, int width, std::size_t i) {
  std::uint32_t v = 0;
  std::memcpy(&v, bytes.data() + i * static_cast<std::size_t>(width), static_cast<std::size_t>(width));
  return v;
}

std::vector<float> values_with_specials(Format f, std::size_t n) {
  std::vector<float> v = testing::sample_fp32(f, n, testing::test_seed() + f.bits());
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0xff800001U),
                            std::numeric_limits<float>::denorm_min(), std::bit_cast<float>(0x807fffffU),
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::min()};
  for (std::size_t i = 0; i < std::size(specials) && i < n; ++i) v[i * 7 % n] = specials[i];
  // Ties between neighbours and one fp32 step either side, where rounding rules differ; random
  // values almost never land on them. Spread over the range, up to the overflow boundary.
  const testing::RefFormat r = testing::ref_of(f);
  const std::uint32_t step = std::max<std::uint32_t>(1, r.max_finite() / static_cast<std::uint32_t>(n / 8));
  std::size_t at = 1;
  for (std::uint32_t lo = 0; lo <= r.max_finite() && at + 3 < n; lo += step, at += 4) {
    const auto mid = static_cast<float>((r.formula(lo) + r.formula(lo + 1)) / 2);
    v[at] = mid;
    v[at + 1] = -std::nextafter(mid, 0.0f);
    v[at + 2] = std::nextafter(mid, std::numeric_limits<float>::infinity());
  }
  return v;
}

class Bulk : public ::testing::TestWithParam<Format> {};

TEST_P(Bulk, EncodeMatchesScalarOnEveryKernel) {
  MANTISSA_TRACE_SEED();
  const Format f = GetParam();
  const int width = f.storage_bytes();
  const std::vector<float> x = values_with_specials(f, 1'000'003);
  const std::uint64_t first = 1000;  // counters need not start at 0
  for (Rounding r : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
    for (bool saturate : {false, true}) {
      const CastOptions o{r, saturate, testing::test_seed()};
      std::vector<std::uint32_t> expected(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) expected[i] = encode(f, x[i], o, first + i);
      for (Isa isa : supported_isas()) {
        IsaScope scope(isa);
        std::vector<std::uint8_t> out(x.size() * static_cast<std::size_t>(width));
        encode_array(f, x.data(), out.data(), x.size(), o, first);
        for (std::size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(element(out, width, i), expected[i])
              << f.name() << " " << isa_name(isa) << " " << rounding_name(r) << " saturate "
              << saturate << " x=" << x[i] << " (bits " << std::bit_cast<std::uint32_t>(x[i]) << ") i=" << i;
        }
      }
    }
  }
}

TEST_P(Bulk, DecodeMatchesScalarOnEveryKernel) {
  const Format f = GetParam();
  const int width = f.storage_bytes();
  // Every pattern for narrow formats; for wider ones, patterns from encoding random values.
  std::vector<std::uint32_t> patterns;
  if (f.bits() <= 16) {
    for (std::uint32_t b = 0; b < (std::uint32_t{1} << f.bits()); ++b) patterns.push_back(b);
  } else {
    for (float v : values_with_specials(f, 100'000)) patterns.push_back(encode(f, v));
  }
  std::vector<std::uint8_t> in(patterns.size() * static_cast<std::size_t>(width));
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    std::memcpy(in.data() + i * static_cast<std::size_t>(width), &patterns[i], static_cast<std::size_t>(width));
  }
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    std::vector<float> out(patterns.size());
    decode_array(f, in.data(), out.data(), patterns.size());
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(decode(f, patterns[i])))
          << f.name() << " " << isa_name(isa) << " pattern " << patterns[i];
    }
  }
}

TEST_P(Bulk, PiecesAndThreadCountsGiveTheSameBits) {
  MANTISSA_TRACE_SEED();
  const Format f = GetParam();
  const int width = f.storage_bytes();
  const std::vector<float> x = values_with_specials(f, 300'001);
  const CastOptions o{Rounding::stochastic, false, testing::test_seed()};
  // Counters that cross a multiple of 2^32, where the stochastic key changes.
  const std::uint64_t first = (std::uint64_t{3} << 32) - 100'000;
  const int threads = omp_get_max_threads();
  std::vector<std::uint8_t> whole(x.size() * static_cast<std::size_t>(width));
  omp_set_num_threads(1);
  encode_array(f, x.data(), whole.data(), x.size(), o, first);
  omp_set_num_threads(2);
  std::vector<std::uint8_t> parts(whole.size());
  const std::size_t cut = 12'345;
  encode_array(f, x.data(), parts.data(), cut, o, first);
  encode_array(f, x.data() + cut, parts.data() + cut * static_cast<std::size_t>(width), x.size() - cut, o, first + cut);
  omp_set_num_threads(threads);
  EXPECT_EQ(whole, parts);
  for (std::size_t i = 0; i < x.size(); i += 997) {
    ASSERT_EQ(element(whole, width, i), encode(f, x[i], o, first + i)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Bulk, ::testing::ValuesIn(testing::formats_under_test()),
                         testing::format_label);

TEST(BulkIsa, UnsupportedLevelsAreRefusedAndPortableAlwaysWorks) {
  EXPECT_TRUE(isa_supported(Isa::portable));
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (!isa_supported(isa)) {
      EXPECT_THROW(set_isa(isa), std::invalid_argument);
    }
  }
}

}  // namespace
}  // namespace mantissa
