// NVFP4 by Transformer Engine's rule (QuantSpec's te) against TE's own reference quantizer, byte for byte:
// tests/golden/nvfp4_te.safetensors, made by tests/golden/make_nvfp4_te_golden.py from TE's
// reference_nvfp4.py on f32 and bf16 tensors of seven kinds (Gaussian, outliers, rows of mixed magnitude,
// a quarter grid of exact ties, all-zero blocks, inf, NaN), 1x16 blocks row-wise and of the transpose
// (each with its own amax, as TE quantizes a tensor for its two products) and 16x16 blocks, and the
// Hadamard-transformed transpose. Every code byte, every block-scale byte and the tensor scale are
// compared; no exception.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../common/golden_file.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/format.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/fp8.h"

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
// 16 x 16 block's scale repeated on each of its rows, TE's layout), the tensor's amax as TE found it (to
// within `amax_ulps` where the values were summed in another order), and the tensor scale 1 / TE's
// encode scale of that amax, exactly.
void expect_te(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, std::int64_t block_rows, const std::string& key,
               const std::string& suffix, int amax_ulps = 0) {
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
  if (std::isnan(amax)) {
    EXPECT_TRUE(std::isnan(q.amax) && std::isnan(q.tensor_scale)) << key << suffix;
    return;
  }
  const auto ulps = std::abs(static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(q.amax)) -
                             static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(amax)));
  EXPECT_LE(ulps, amax_ulps) << key << suffix << ": amax " << q.amax << ", TE's " << amax;
  const float encode = std::min((448.0f * 6.0f) / q.amax, 3.40282347e38f);
  EXPECT_EQ(q.tensor_scale, 1.0f / (encode == 0 ? 1.0f : encode)) << key << suffix;  // (an inf amax: encode 0 -> 1)
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

// TE's weight-gradient operand: the 16-point Hadamard transform along the tensor's rows (of its
// transpose's, in TE's layout) with TE's sign vector, 0xd7e8 as mantissa's hadamard16 takes signs, the
// result in the input's dtype (TE multiplies in it), then quantized by TE's rule with an amax of its own.
// mantissa's butterfly sums the 16 terms in another order than TE's dense product; on these inputs no
// code or scale byte differs, and one tensor amax (Gaussian, f32) is TE's plus one ulp. The recipe nvfp4
// runs exactly this (its row's signs and dtype rule; the layer's oracle in fp8_test.cpp).
TEST_P(TeNvfp4, TheHadamardTransformedCopyIsTesWithTesSigns) {
  if (GetParam() == "inf" || GetParam() == "nan") GTEST_SKIP() << "a transform of inf or NaN is NaN throughout its group";
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string base = "te." + GetParam() + "." + dtype;
    std::vector<float> x = golden().get<float>(base + ".input");
    ASSERT_EQ(QuantRecipe::nvfp4.info().hadamard_signs, 0xd7e8);
    hadamard16(x, kRows, kCols, true, QuantRecipe::nvfp4.info().hadamard_signs);
    if (std::string(dtype) == "bf16") {
      for (float& v : x) v = static_cast<float>(decode(Format::bf16(), encode(Format::bf16(), v)));
    }
    // (One amax of the ten is TE's plus one ulp: the largest value, summed in another order.)
    expect_te(transposed(x, kRows, kCols), kCols, kRows, 1, base + ".1x16_rht", "_t", 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TeNvfp4,
                         ::testing::Values("gauss", "outliers", "magnitudes", "quarter_grid", "zero_blocks", "inf", "nan"));

// Stochastic rounding as Transformer Engine's tests check it (tests/pytorch/nvfp4/
// test_nvfp4_sr_quantize.py), on x = 2 N(0, 1) - 1 in f32 and in bf16, with nvfp4's own gradient spec:
// the mean of 50 draws lies nearer x (RMSE) than round-to-nearest does, for the data-gradient copy (1 x 16
// blocks along x's rows) and for the weight-gradient copy (x's transpose, Hadamard-transformed with the
// recipe's signs and rounded to x's dtype, as the layer makes it); and the mean of 1000 draws is unbiased:
// its RMSE at most a tenth of round-to-nearest's. Except where the format clips: where the block scale,
// rounded to E4M3, came out below the block's amax / 6, the largest values lie past 6 and saturate, in
// every draw as in round-to-nearest (TE's rule does the same); those are compared with round-to-nearest's.
TEST(TeNvfp4, StochasticRoundingBeatsNearestOnAverageAndIsUnbiasedInBothCopies) {
  constexpr std::int64_t rows = 64, cols = 128;
  const RecipeInfo& nvfp4 = QuantRecipe::nvfp4.info();
  const QuantSpec sr = QuantOptions{.recipe = QuantRecipe::nvfp4}.spec(Fp8Operand::grad_output);
  ASSERT_EQ(sr.rounding, Rounding::stochastic);
  ASSERT_EQ(sr.rule, ScaleRule::te);
  QuantSpec rn = sr;
  rn.rounding = Rounding::nearest_even;
  std::mt19937_64 rng(53);
  std::normal_distribution<float> normal;
  for (const bool bf16 : {false, true}) {
    const auto in_dtype = [bf16](float v) { return bf16 ? static_cast<float>(decode(Format::bf16(), encode(Format::bf16(), v))) : v; };
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    for (float& v : x) v = in_dtype(normal(rng) * 2 - 1);
    std::vector<float> wgrad = x;  // the weight-gradient copy: transformed, transposed, in x's dtype
    hadamard16(wgrad, rows, cols, true, nvfp4.hadamard_signs);
    for (float& v : wgrad) v = in_dtype(v);
    wgrad = transposed(wgrad, rows, cols);
    for (const auto& [copy, r, c] : {std::tuple{&x, rows, cols}, std::tuple{&wgrad, cols, rows}}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + (copy == &x ? ", data-gradient copy" : ", weight-gradient copy"));
      const QuantizedBlocks nq = quantize_blocks(*copy, r, c, rn);
      const std::vector<float> near = dequantize_blocks(nq, r, c, rn);
      std::vector<bool> clipped(copy->size());
      std::int64_t n_clipped = 0;
      for (std::size_t i = 0; i < copy->size(); ++i) {
        clipped[i] = (nq.codes[i] & 7) == 7 && std::fabs((*copy)[i]) > std::fabs(near[i]);  // at 6, past it
        n_clipped += clipped[i];
      }
      EXPECT_LT(n_clipped, r * c / 16) << "fewer than one value a block (a block's largest, in about half the blocks)";
      const auto rmse = [&](const std::vector<double>& y) {
        double sum = 0;
        for (std::size_t i = 0; i < y.size(); ++i) {
          if (!clipped[i]) sum += (y[i] - (*copy)[i]) * (y[i] - (*copy)[i]);
        }
        return std::sqrt(sum / static_cast<double>(static_cast<std::int64_t>(y.size()) - n_clipped));
      };
      const double rn_error = rmse(std::vector<double>(near.begin(), near.end()));
      std::vector<double> mean(copy->size(), 0.0);
      for (int draw = 1; draw <= 1000; ++draw) {
        const std::vector<float> v = dequantize_blocks(quantize_blocks(*copy, r, c, sr, static_cast<std::uint64_t>(draw)), r, c, sr);
        for (std::size_t i = 0; i < v.size(); ++i) mean[i] += v[i];
        if (draw == 50 || draw == 1000) {
          std::vector<double> m(mean);
          for (double& e : m) e /= draw;
          if (draw == 50) {
            EXPECT_LT(rmse(m), rn_error);
          } else {
            EXPECT_LE(rmse(m), 0.1 * rn_error);
            for (std::size_t i = 0; i < m.size(); ++i) {
              if (clipped[i]) {
                EXPECT_EQ(m[i], near[i]) << i;
              }
            }
          }
        }
      }
    }
  }
}

// The layer against TE's: fp8_linear by nvfp4 (stochastic rounding off: its draws are TE's generator's
// alone) on TE's golden x and dy (bf16) and w, against TE's reference GEMM of its recipe's operands
// (make_nvfp4_te_golden.py's layer_products): y = x w^T, dx = dy w, dw = dy^T x with both transformed.
// The operands are the same bits (the cases above); TE multiplies block by block in f32, mantissa the
// whole inner dimension in one f32 accumulation, and its tensor scales are 1 / (2688 / amax) where TE's
// alpha is amax_a amax_b / 2688^2: so the f32 results agree to a few f32 roundings of the largest, and
// the bf16 outputs (y, dx) where no such difference crosses a bf16 rounding boundary.
TEST(TeNvfp4, TheLayersThreeProductsAreTesReferenceGemms) {
  constexpr std::int64_t m = 64, k = 128, n = 32;
  const auto tensor = [](const std::string& key, const Shape& shape, DType dtype) {
    const std::vector<float> v = golden().get<float>("te.layer." + key);
    return Tensor::from_values(std::vector<double>(v.begin(), v.end()), shape, dtype);
  };
  Tensor x = tensor("x", {m, k}, DType::bf16);
  x.set_requires_grad();
  Tensor w = tensor("w", {n, k}, DType::f32);
  w.set_requires_grad();
  const auto state = std::make_shared<QuantState>(QuantOptions{.recipe = QuantRecipe::nvfp4, .nvfp4_sr = false});
  Tensor y;
  {
    Autocast bf16(DType::bf16);
    y = fp8_linear(x, w, Tensor(), state);
  }
  y.backward(tensor("dy", {m, n}, DType::bf16));
  for (const auto& [name, ours] : {std::pair<std::string, Tensor>{"y", y}, {"dx", x.grad()}, {"dw", w.grad()}}) {
    const std::vector<float> te = golden().get<float>("te.layer." + name);
    const std::vector<double> v = ours.to_doubles();
    ASSERT_EQ(v.size(), te.size()) << name;
    double largest = 0;
    for (const float t : te) largest = std::max(largest, std::fabs(static_cast<double>(t)));
    std::int64_t bf16_steps = 0;
    double worst = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (ours.dtype() == DType::bf16) {  // the output rounded to bf16: TE's, or its bf16 neighbour
        const auto ours_bits = static_cast<std::int64_t>(encode(Format::bf16(), static_cast<float>(v[i])));
        const auto te_bits = static_cast<std::int64_t>(encode(Format::bf16(), te[i]));
        EXPECT_LE(std::abs(ours_bits - te_bits), 1) << name << " " << i << ": " << v[i] << ", TE's " << te[i];
        bf16_steps += ours_bits != te_bits;
      } else {
        worst = std::max(worst, std::fabs(v[i] - static_cast<double>(te[i])));
      }
    }
    if (ours.dtype() == DType::bf16) {
      EXPECT_LE(bf16_steps, static_cast<std::int64_t>(v.size()) / 100) << name << ": at most 1% one bf16 step apart";
    } else {
      EXPECT_LE(worst, 8 * 0x1p-24 * largest) << name << ": within 8 f32 roundings of the largest";
    }
    RecordProperty(name + "_bf16_steps", static_cast<int>(bf16_steps));
    std::printf("%s: %lld of %zu one bf16 step apart; largest f32 difference %.3g of the largest %.3g\n", name.c_str(),
                static_cast<long long>(bf16_steps), v.size(), worst, largest);
  }
}

TEST(TeNvfp4, TheRuleReadsBackFromItsWordsAndIsNvfp4s) {
  const QuantSpec te{.element = Format::e2m1(), .block_cols = 16, .scale = ScaleFormat::e4m3, .rule = ScaleRule::te};
  EXPECT_EQ(te.str(), "e2m1 1x16 e4m3*f32 te nearest");
  EXPECT_EQ(QuantSpec::parse(te.str()), te);
  EXPECT_EQ(QuantSpec::parse("e2m1 1x16 e4m3*f32 nearest").rule, ScaleRule::floor);  // torchao's goes unsaid
  EXPECT_THROW((QuantSpec{.element = Format::e4m3(), .rule = ScaleRule::te}.check()), std::invalid_argument);  // E8M0 scales
}

}  // namespace
}  // namespace mantissa
