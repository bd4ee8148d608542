// NVFP4 by Transformer Engine's rule (QuantSpec's te) against TE's own reference quantizer, byte for byte:
// tests/golden/nvfp4_te.safetensors, made by tests/golden/make_nvfp4_te_golden.py from TE's
// reference_nvfp4.py on f32 and bf16 tensors of seven kinds (Gaussian, outliers, rows of mixed magnitude,
// a quarter grid of exact ties, all-zero blocks, inf, NaN), 1x16 blocks row-wise and of the transpose
// (each with its own amax, as TE quantizes a tensor for its two products) and 16x16 blocks. Every code
// byte, every block-scale byte and the tensor scale are compared; no exception.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../common/golden_file.h"
#include "mantissa/numeric/microscale.h"

namespace mantissa {
namespace {

const testing::GoldenFile& golden() {
  static const testing::GoldenFile file("nvfp4_te.safetensors");
  return file;
}

constexpr std::int64_t kRows = 64, kCols = 256;

std::vector<float> transposed(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) t[static_cast<std::size_t>(c * rows + r)] = x[static_cast<std::size_t>(r * cols + c)];
  }
  return t;
}

// The share of bytes that differ, and the first few named.
std::int64_t differing(const std::vector<std::uint8_t>& ours, const std::vector<std::uint8_t>& te, const std::string& what) {
  EXPECT_EQ(ours.size(), te.size()) << what;
  std::int64_t n = 0;
  for (std::size_t i = 0; i < ours.size() && i < te.size(); ++i) {
    if (ours[i] != te[i] && n++ < 3) ADD_FAILURE() << what << " byte " << i << ": mantissa " << int{ours[i]} << ", TE " << int{te[i]};
  }
  return n;
}

// One tensor quantized as TE quantizes it one way: codes packed two a byte, scales one per block (a
// 16 x 16 block's scale repeated on each of its rows, TE's layout), and the tensor scale 1 / TE's encode
// scale of its amax.
void expect_te(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, std::int64_t block_rows, const std::string& key,
               const std::string& suffix) {
  const QuantSpec spec{.element = Format::e2m1(), .block_rows = block_rows, .block_cols = 16, .scale = ScaleFormat::e4m3,
                       .rule = ScaleRule::te};
  const QuantizedBlocks q = quantize_blocks(x, rows, cols, spec);
  std::vector<std::uint8_t> scales;
  const std::int64_t nbc = cols / 16;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < nbc; ++j) scales.push_back(q.scale_codes[static_cast<std::size_t>(r / block_rows * nbc + j)]);
  }
  EXPECT_EQ(differing(pack_fp4(q.codes), golden().get<std::uint8_t>(key + ".codes" + suffix), key + ".codes" + suffix), 0);
  EXPECT_EQ(differing(scales, golden().get<std::uint8_t>(key + ".scales" + suffix), key + ".scales" + suffix), 0);
  const float amax = golden().get<float>(key + ".amax" + suffix).at(0);
  const float want = 1.0f / std::min((448.0f * 6.0f) / amax, 3.40282347e38f);  // (NaN stays NaN: compared below)
  if (std::isnan(amax)) {
    EXPECT_TRUE(std::isnan(q.tensor_scale)) << key << suffix;
  } else {
    EXPECT_EQ(q.tensor_scale, std::isinf(amax) ? 1.0f : want) << key << suffix;  // (an inf amax: encode 0 -> 1)
  }
}

class TeNvfp4 : public ::testing::TestWithParam<std::string> {};

TEST_P(TeNvfp4, CodesScalesAndTensorScalesAreTesByteForByte) {
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string base = "te." + GetParam() + "." + dtype;
    ASSERT_TRUE(golden().has(base + ".input")) << base;
    const std::vector<float> x = golden().get<float>(base + ".input");
    ASSERT_EQ(x.size(), static_cast<std::size_t>(kRows * kCols));
    const std::vector<float> xt = transposed(x, kRows, kCols);
    for (const auto& [way, block_rows] : {std::pair<std::string, std::int64_t>{"1x16", 1}, {"16x16", 16}}) {
      expect_te(x, kRows, kCols, block_rows, base + "." + way, "");
      expect_te(xt, kCols, kRows, block_rows, base + "." + way, "_t");  // the column-wise copy, its own amax
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TeNvfp4,
                         ::testing::Values("gauss", "outliers", "magnitudes", "quarter_grid", "zero_blocks", "inf", "nan"));

TEST(TeNvfp4, TheRuleReadsBackFromItsWordsAndIsNvfp4s) {
  const QuantSpec te{.element = Format::e2m1(), .block_cols = 16, .scale = ScaleFormat::e4m3, .rule = ScaleRule::te};
  EXPECT_EQ(te.str(), "e2m1 1x16 e4m3*f32 te nearest");
  EXPECT_EQ(QuantSpec::parse(te.str()), te);
  EXPECT_EQ(QuantSpec::parse("e2m1 1x16 e4m3*f32 nearest").rule, ScaleRule::floor);  // torchao's goes unsaid
  EXPECT_THROW((QuantSpec{.element = Format::e4m3(), .rule = ScaleRule::te}.check()), std::invalid_argument);  // E8M0 scales
}

}  // namespace
}  // namespace mantissa
