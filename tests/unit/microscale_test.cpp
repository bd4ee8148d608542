// Block-scaled quantization against two independent references: torchao's reference quantizers (golden
// vectors made by tests/golden/make_microscale_golden.py, committed), byte for byte; and the recipes'
// definitions written out here in double arithmetic, on fresh random inputs. Also FP4 E2M1 exhaustively
// against the OCP table, E8M0, FP4 packing, stochastic rounding of the elements and the Hadamard transform.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/numeric/recipes.h"
#include "../common/golden_file.h"
#include "test_support.h"

namespace mantissa {
namespace {

using testing::test_seed;

// OCP MX 1.0, table of FP4 E2M1 values by magnitude pattern.
constexpr double kE2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

TEST(Fp4, EveryPatternDecodesAsTheOcpTableSays) {
  for (std::uint32_t b = 0; b < 16; ++b) {
    const double want = (b & 8U ? -1 : 1) * kE2m1[b & 7U];
    EXPECT_EQ(decode(Format::e2m1(), b), want) << b;
    EXPECT_EQ(std::signbit(decode(Format::e2m1(), b)), (b & 8U) != 0) << b;
  }
  EXPECT_EQ(Format::parse("e2m1"), Format::e2m1());
  EXPECT_FALSE(Format::e2m1().has_nan());
  EXPECT_EQ(traits(Format::e2m1()).max_finite, 6.0);
}

// Nearest, ties to the even pattern, past 6 saturating, over f32 from 0 to 16 (a prime stride of
// patterns, ~2000 values per binade) and every midpoint and its two f32 neighbours.
TEST(Fp4, EncodingRoundsToNearestEvenAndSaturates) {
  const auto nearest = [](double a) {
    std::uint32_t best = 0;
    for (std::uint32_t m = 1; m < 8; ++m) {
      const double d = std::fabs(a - kE2m1[m]), db = std::fabs(a - kE2m1[best]);
      if (d < db || (d == db && m % 2 == 0)) best = m;
    }
    return best;
  };
  std::vector<float> xs;
  for (std::uint32_t bits = 0; bits <= std::bit_cast<std::uint32_t>(16.0f); bits += 4099) xs.push_back(std::bit_cast<float>(bits));
  for (int m = 0; m < 7; ++m) {
    const auto mid = static_cast<float>((kE2m1[m] + kE2m1[m + 1]) / 2);
    for (const float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 16.0f)}) xs.push_back(v);
  }
  for (const float x : xs) {
    for (const float s : {x, -x}) {
      const std::uint32_t want = (std::signbit(s) ? 8U : 0U) | nearest(std::fabs(static_cast<double>(s)));
      ASSERT_EQ(encode(Format::e2m1(), s), want) << s;
    }
  }
  // No inf or NaN to give: the largest finite value of the sign.
  EXPECT_EQ(encode(Format::e2m1(), std::numeric_limits<float>::infinity()), 7U);
  EXPECT_EQ(encode(Format::e2m1(), -std::numeric_limits<float>::infinity()), 15U);
  EXPECT_EQ(encode(Format::e2m1(), std::numeric_limits<float>::quiet_NaN()), 7U);
}

TEST(Fp4, PackingPutsTheFirstValueInTheLowNibble) {
  const std::vector<std::uint8_t> codes = {0x1, 0xf, 0x7, 0x8, 0x3};
  const std::vector<std::uint8_t> packed = pack_fp4(codes);
  EXPECT_EQ(packed, (std::vector<std::uint8_t>{0xf1, 0x87, 0x03}));
  EXPECT_EQ(unpack_fp4(packed, codes.size()), codes);
  EXPECT_THROW(unpack_fp4(packed, 7), std::invalid_argument);
}

TEST(E8m0, ScalesArePowersOfTwoWithNaNAtTheTop) {
  for (int b = 0; b < 255; ++b) EXPECT_EQ(decode_e8m0(static_cast<std::uint8_t>(b)), std::ldexp(1.0, b - 127)) << b;
  EXPECT_TRUE(std::isnan(decode_e8m0(255)));
}

// ---- torchao's golden vectors ----

const testing::GoldenFile& golden() {
  static const testing::GoldenFile file("microscale.safetensors");
  return file;
}

// Differences between mantissa's codes and torchao's, element codes compared as bytes except in blocks
// whose scale is NaN (E8M0 0xFF): OCP MX 1.0 (section 6.3) makes every value of such a block NaN,
// whatever its element bits. There the casts differ in what they write for a NaN element: torchao's FP4
// cast arbitrary bits (FP4 has no NaN; mantissa writes the largest value of the sign), PyTorch's e5m2
// cast 0x7F (mantissa's casts write the canonical quiet NaN, 0x7E).
struct Diff {
  std::int64_t scales = 0, codes = 0, in_nan_blocks = 0;
};

Diff compare(const QuantizedBlocks& q, const std::vector<std::uint8_t>& scales, std::vector<std::uint8_t> codes,
             const QuantSpec& spec, std::int64_t cols) {
  Diff d;
  EXPECT_EQ(q.scale_codes.size(), scales.size());
  for (std::size_t i = 0; i < scales.size() && i < q.scale_codes.size(); ++i) d.scales += q.scale_codes[i] != scales[i];
  if (spec.element == Format::e2m1()) codes = unpack_fp4(codes, q.codes.size());
  EXPECT_EQ(q.codes.size(), codes.size());
  const std::int64_t nbc = cols / spec.block_cols;
  for (std::size_t i = 0; i < codes.size() && i < q.codes.size(); ++i) {
    const auto r = static_cast<std::int64_t>(i) / cols, c = static_cast<std::int64_t>(i) % cols;
    const std::uint8_t s = scales[static_cast<std::size_t>(r / spec.block_rows * nbc + c / spec.block_cols)];
    if (spec.scale == ScaleFormat::e8m0 && s == 255) {
      ++d.in_nan_blocks;
      continue;
    }
    if (q.codes[i] != codes[i] && d.codes < 5) {
      ADD_FAILURE() << "value " << i << ": mantissa " << int{q.codes[i]} << ", torchao " << int{codes[i]};
    }
    d.codes += q.codes[i] != codes[i];
  }
  return d;
}

// The MX cases the golden file must hold: every element format of every recipe in the table whose
// scales are E8M0, with both rules a run can choose (floor, rceil), and EVEN for e4m3; as
// "ELEMENT.RULE", the file's "mx.ELEMENT.RULE.codes" and ".scales". A recipe added to the table is
// compared here unasked, and fails until the golden file has its elements.
std::vector<std::string> mx_golden_cases() {
  std::set<std::string> cases{"e4m3.even", "e5m2.floor"};
  for (const QuantRecipe r : QuantRecipe::all()) {
    if (!r.info().scale_rule_choice()) continue;
    for (const Format element : {r.info().forward, r.info().gradient}) {
      for (const char* rule : {"floor", "rceil"}) cases.insert(element.name() + "." + rule);
    }
  }
  return {cases.begin(), cases.end()};
}

class TorchaoGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchaoGolden, MxCodesAndScalesAreTorchaosByteForByte) {
  const std::string name = GetParam();
  const std::size_t dot = name.find('.');
  const QuantSpec spec{.element = Format::parse(name.substr(0, dot)), .rule = parse_scale_rule(name.substr(dot + 1))};
  const std::vector<float> x = golden().get<float>("mx.input");
  const std::int64_t cols = 256, rows = static_cast<std::int64_t>(x.size()) / cols;
  ASSERT_GE(x.size(), 100000U);
  ASSERT_TRUE(golden().header.contains("mx." + name + ".codes"))
      << "tests/golden/microscale.safetensors has no vectors for " << name << ": run tests/golden/make_microscale_golden.py";
  const QuantizedBlocks q = quantize_blocks(x, rows, cols, spec);
  const Diff d = compare(q, golden().get<std::uint8_t>("mx." + name + ".scales"), golden().get<std::uint8_t>("mx." + name + ".codes"),
                         spec, cols);
  EXPECT_EQ(d.scales, 0) << name;
  EXPECT_EQ(d.codes, 0) << name;
  EXPECT_LT(d.in_nan_blocks, static_cast<std::int64_t>(x.size() / 20)) << "too few values compared";
}

INSTANTIATE_TEST_SUITE_P(Recipes, TorchaoGolden, ::testing::ValuesIn(mx_golden_cases()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string s = param.param;
                           for (char& c : s) c = c == '.' ? '_' : c;
                           return s;
                         });

TEST(TorchaoGolden, Nvfp4CodesScalesAndTensorScalesAreTorchaos) {
  const QuantSpec spec = quant_spec("nvfp4-torchao");
  const std::vector<float> x = golden().get<float>("nvfp4.input");
  const std::vector<std::uint8_t> codes = golden().get<std::uint8_t>("nvfp4.codes");
  const std::vector<std::uint8_t> scales = golden().get<std::uint8_t>("nvfp4.scales");
  const std::vector<float> tensor_scales = golden().get<float>("nvfp4.tensor_scale");
  const std::int64_t rows = 64, cols = 256, n = rows * cols;
  ASSERT_EQ(x.size(), static_cast<std::size_t>(n) * tensor_scales.size());
  for (std::size_t t = 0; t < tensor_scales.size(); ++t) {
    const QuantizedBlocks q = quantize_blocks(std::span(x).subspan(t * static_cast<std::size_t>(n), static_cast<std::size_t>(n)),
                                              rows, cols, spec);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(q.tensor_scale), std::bit_cast<std::uint32_t>(tensor_scales[t])) << t;
    const auto slice = [t](const std::vector<std::uint8_t>& v, std::size_t per) {
      return std::vector<std::uint8_t>(v.begin() + static_cast<std::ptrdiff_t>(t * per), v.begin() + static_cast<std::ptrdiff_t>((t + 1) * per));
    };
    const Diff d = compare(q, slice(scales, static_cast<std::size_t>(n / 16)), slice(codes, static_cast<std::size_t>(n / 2)), spec, cols);
    EXPECT_EQ(d.scales, 0) << "tensor " << t;
    EXPECT_EQ(d.codes, 0) << "tensor " << t;
  }
}

// ---- the definitions, written out in double ----

// Nearest-even rounding of a to `f` by searching its list of values (saturating): a pattern.
std::uint32_t round_by_list(Format f, double a) {
  std::uint32_t best = 0;
  const double v = std::fabs(a);
  for (std::uint32_t m = 1; m <= f.max_finite_bits(); ++m) {
    const double dm = std::fabs(v - decode(f, m)), db = std::fabs(v - decode(f, best));
    if (dm < db || (dm == db && m % 2 == 0)) best = m;
  }
  return (std::signbit(a) ? f.sign_bit() : 0U) | best;
}

// OCP MX 1.0 section 6.3 with the floor rule: X = 2^(floor(log2 amax) - emax); P_i = round(V_i / X).
TEST(MicroscaleDefinition, MxFloorOnFreshRandomBlocksFollowsTheOcpRule) {
  MANTISSA_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  std::uniform_real_distribution<double> exponent(-30, 30);
  std::normal_distribution<double> normal;
  for (const Format element : {Format::e4m3(), Format::e5m2(), Format::e2m1()}) {
    const QuantSpec spec{.element = element};
    const std::int64_t rows = 8, cols = 128;
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<float>(normal(rng) * std::exp2(exponent(rng) / (i % 32 == 0 ? 1 : 4)));
    }
    const QuantizedBlocks q = quantize_blocks(x, rows, cols, spec);
    const int emax = static_cast<int>(std::floor(std::log2(decode(element, element.max_finite_bits()))));
    for (std::int64_t b = 0; b < rows * cols / 32; ++b) {
      double amax = 0;
      for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(static_cast<double>(x[static_cast<std::size_t>(b * 32 + k)])));
      const int e = static_cast<int>(std::floor(std::log2(amax))) - emax;
      ASSERT_EQ(q.scale_codes[static_cast<std::size_t>(b)], e + 127) << element.name() << " block " << b;
      for (int k = 0; k < 32; ++k) {
        const auto i = static_cast<std::size_t>(b * 32 + k);
        ASSERT_EQ(q.codes[i], round_by_list(element, std::ldexp(static_cast<double>(x[i]), -e))) << element.name() << " value " << i;
      }
    }
  }
}

// NVFP4 from its definition: tensor scale amax / (448 * 6); block scale e4m3(amax_b / 6 / tensor scale);
// elements round(V / (block scale * tensor scale)) in e2m1, here with 16 x 16 blocks (the weights').
TEST(MicroscaleDefinition, Nvfp4TwoLevelScalesOnFreshRandomTensors) {
  MANTISSA_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 1);
  std::normal_distribution<double> normal;
  QuantSpec spec = quant_spec("nvfp4-torchao");
  spec.block_rows = 16;
  const std::int64_t rows = 32, cols = 64;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (float& v : x) v = static_cast<float>(normal(rng) * 3);
  x[17] = 40;  // an outlier
  const QuantizedBlocks q = quantize_blocks(x, rows, cols, spec);
  double amax = 0;
  for (const float v : x) amax = std::max(amax, std::fabs(static_cast<double>(v)));
  EXPECT_NEAR(q.tensor_scale, amax / 2688, amax / 2688 * 1e-7);
  std::int64_t differ = 0;
  for (std::int64_t br = 0; br < 2; ++br) {
    for (std::int64_t bc = 0; bc < 4; ++bc) {
      double bmax = 0;
      for (std::int64_t r = br * 16; r < br * 16 + 16; ++r) {
        for (std::int64_t c = bc * 16; c < bc * 16 + 16; ++c) bmax = std::max(bmax, std::fabs(static_cast<double>(x[static_cast<std::size_t>(r * cols + c)])));
      }
      const std::uint8_t code = q.scale_codes[static_cast<std::size_t>(br * 4 + bc)];
      EXPECT_EQ(code, encode(Format::e4m3(), static_cast<float>(bmax / 6 / q.tensor_scale)));
      const double scale = decode(Format::e4m3(), code) * static_cast<double>(q.tensor_scale);
      for (std::int64_t r = br * 16; r < br * 16 + 16; ++r) {
        for (std::int64_t c = bc * 16; c < bc * 16 + 16; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          // The recipe multiplies by an f32 reciprocal: a value within an f32 rounding of a tie may go
          // either way; count those apart.
          const std::uint32_t want = round_by_list(Format::e2m1(), std::min(6.0, std::max(-6.0, x[i] / scale)));
          differ += q.codes[i] != want;
        }
      }
    }
  }
  EXPECT_LE(differ, 2) << "of " << x.size();
}

// NVFP4's reason for 16 x 16 weight blocks (Transformer Engine's 2-D quantization): the weight quantized
// once serves both the forward product (blocks along `in`) and the data gradient's (along `out`), because
// quantizing W and quantizing its transpose give transposed values, bit for bit, with the same scales;
// sizes not a multiple of 16 included.
TEST(MicroscaleDefinition, SquareBlocksQuantizeATensorAndItsTransposeAlike) {
  MANTISSA_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 3);
  std::normal_distribution<double> normal;
  QuantSpec spec = quant_spec("nvfp4-torchao");
  spec.block_rows = 16;
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{48, 80}, {37, 21}}) {
    std::vector<float> w(static_cast<std::size_t>(rows * cols)), wt(w.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto v = static_cast<float>(normal(rng) * std::exp(normal(rng)));  // spread over binades
        w[static_cast<std::size_t>(r * cols + c)] = v;
        wt[static_cast<std::size_t>(c * rows + r)] = v;
      }
    }
    const QuantizedBlocks q = quantize_blocks(w, rows, cols, spec), qt = quantize_blocks(wt, cols, rows, spec);
    EXPECT_EQ(q.tensor_scale, qt.tensor_scale);
    const std::vector<float> v = dequantize_blocks(q, rows, cols, spec), vt = dequantize_blocks(qt, cols, rows, spec);
    std::int64_t differ = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        differ += std::bit_cast<std::uint32_t>(v[static_cast<std::size_t>(r * cols + c)]) !=
                  std::bit_cast<std::uint32_t>(vt[static_cast<std::size_t>(c * rows + r)]);
      }
    }
    EXPECT_EQ(differ, 0) << rows << " x " << cols;
    const std::int64_t nbr = (rows + 15) / 16, nbc = (cols + 15) / 16;
    for (std::int64_t i = 0; i < nbr; ++i) {
      for (std::int64_t j = 0; j < nbc; ++j) {
        EXPECT_EQ(q.scale_codes[static_cast<std::size_t>(i * nbc + j)], qt.scale_codes[static_cast<std::size_t>(j * nbr + i)]);
      }
    }
  }
}

TEST(MicroscaleDefinition, AZeroTensorGetsTensorScaleOneAndZeroCodes) {
  const std::vector<float> x(64, 0.0f);
  const QuantizedBlocks q = quantize_blocks(x, 4, 16, quant_spec("nvfp4-torchao"));
  EXPECT_EQ(q.tensor_scale, 1.0f);
  for (const std::uint8_t c : q.codes) EXPECT_EQ(c, 0);
  for (const std::uint8_t s : q.scale_codes) EXPECT_EQ(decode(Format::e4m3(), s), 0.015625f);
}

// Stochastic rounding of the elements: each code is one of the two neighbours of V / X, the mean of many
// draws is V / X, and the draws depend on the seed and the element's index alone.
TEST(MicroscaleDefinition, StochasticElementsAreUnbiasedAndReproducible) {
  QuantSpec spec = quant_spec("mxfp4");
  spec.rounding = Rounding::stochastic;
  std::vector<float> x(32, 1.3f);
  x[0] = 6.0f;  // the scale: 2^(2 - 2) = 1
  double sum = 0;
  const int draws = 4000;
  for (int s = 0; s < draws; ++s) {
    const QuantizedBlocks q = quantize_blocks(x, 1, 32, spec, static_cast<std::uint64_t>(s));
    ASSERT_EQ(q.scale_codes[0], 127);
    for (int i = 1; i < 32; ++i) {
      const float v = decode(Format::e2m1(), q.codes[static_cast<std::size_t>(i)]);
      ASSERT_TRUE(v == 1.0f || v == 1.5f) << v;
      sum += v;
    }
  }
  EXPECT_NEAR(sum / (draws * 31.0), 1.3, 0.005);
  const QuantizedBlocks a = quantize_blocks(x, 1, 32, spec, 7), b = quantize_blocks(x, 1, 32, spec, 7);
  const QuantizedBlocks c = quantize_blocks(x, 1, 32, spec, 8);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_NE(a.codes, c.codes);
}

TEST(MicroscaleDefinition, CountsSaturatedAndUnderflowedValues) {
  std::vector<float> x(32, 1e-9f);
  x[0] = 300;  // floor: X = 2^(8 - 8) = 1, so 300 fits; 1e-9 underflows
  x[1] = 460;  // past 448 under the same scale: saturates
  const QuantizedBlocks q = quantize_blocks(x, 1, 32, quant_spec("mxfp8"));
  EXPECT_EQ(q.saturated, 1);
  EXPECT_EQ(q.underflowed, 30);
  EXPECT_EQ(q.amax, 460.0f);
}

TEST(MicroscaleDefinition, BadSpecsAndSizesAreRefused) {
  EXPECT_THROW(quant_spec("mxfp16"), std::invalid_argument);
  EXPECT_THROW(quantize_blocks(std::vector<float>(10), 3, 3, quant_spec("mxfp8")), std::invalid_argument);
  EXPECT_THROW(quantize_blocks(std::vector<float>(4), 2, 2, QuantSpec{.element = Format::bf16()}), std::invalid_argument);
  EXPECT_THROW(quantize_blocks(std::vector<float>(4), 2, 2, QuantSpec{.block_cols = 0}), std::invalid_argument);
}

// ---- the Hadamard transform ----

TEST(Hadamard16, IsTheSignedSylvesterMatrixOverFourAndKeepsProducts) {
  MANTISSA_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 2);
  std::normal_distribution<float> normal;
  const std::int64_t rows = 32, cols = 3;
  std::vector<float> a(static_cast<std::size_t>(rows * cols)), b(static_cast<std::size_t>(rows * 5));
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  const std::uint16_t signs = 0xa5c3;
  std::vector<float> ta = a, tb = b;
  hadamard16(ta, rows, cols, true, signs);
  hadamard16(tb, rows, 5, true, signs);
  for (std::int64_t g = 0; g < rows / 16; ++g) {
    for (std::int64_t c = 0; c < cols; ++c) {
      for (int i = 0; i < 16; ++i) {
        double want = 0;
        for (int j = 0; j < 16; ++j) {
          const double h = (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * ((signs >> j) & 1 ? -1.0 : 1.0);
          want += h * a[static_cast<std::size_t>((g * 16 + j) * cols + c)];
        }
        EXPECT_NEAR(ta[static_cast<std::size_t>((g * 16 + i) * cols + c)], want / 4, 1e-5);
      }
    }
  }
  // a^T b over the rows, before and after: the transform is orthonormal.
  for (std::int64_t i = 0; i < cols; ++i) {
    for (std::int64_t j = 0; j < 5; ++j) {
      double before = 0, after = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        before += static_cast<double>(a[static_cast<std::size_t>(r * cols + i)]) * b[static_cast<std::size_t>(r * 5 + j)];
        after += static_cast<double>(ta[static_cast<std::size_t>(r * cols + i)]) * tb[static_cast<std::size_t>(r * 5 + j)];
      }
      EXPECT_NEAR(after, before, 1e-4);
    }
  }
  EXPECT_THROW(hadamard16(a, rows, cols, false, signs), std::invalid_argument);
}

}  // namespace
}  // namespace mantissa
