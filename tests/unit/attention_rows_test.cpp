// Attention's softmax rows (src/backend/cpu/attention_rows.h): the plain loop and the AVX-512 kernel
// give the same bits (where the CPU has AVX-512), forward and backward, f32 and bf16, on random rows of
// every length up to 40 and longer ones with every kind of tail, all visible or a causal prefix; both
// within named tolerances of the definition in double; and the special values: NaN in a row, -inf
// scores, +inf, and rows that see no key.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../../src/backend/cpu/attention_rows.h"
#include "../../src/numeric/encode_rules.h"
#include "../common/test_seed.h"
#include "mantissa/numeric/bulk.h"

namespace mantissa::detail {
namespace {

constexpr float kScale = 0.125f;
constexpr double kF32Eps = 0x1p-24;  // half an ulp of 1, relative
constexpr double kBf16Eps = 0x1p-8;  // half an ulp of 1 in bf16, relative

float widen(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

// A row's probabilities, and the gradient from them, as each kernel writes them.
struct Rows {
  std::vector<float> p32, g32;
  std::vector<std::uint16_t> p16, g16;  // bf16 probabilities, and the gradient from them in bf16
  std::vector<float> g_from16;          // f32 gradient from the bf16 probabilities
};

Rows run(bool avx512, const std::vector<float>& s, const std::vector<float>& dp, std::int64_t n) {
  const auto len = static_cast<std::int64_t>(s.size());
  Rows r{std::vector<float>(s.size()), std::vector<float>(s.size()), std::vector<std::uint16_t>(s.size()),
         std::vector<std::uint16_t>(s.size()), std::vector<float>(s.size())};
  std::vector<float> work(s.size());
  if (avx512) {
    attention_softmax_row_avx512(s.data(), work.data(), r.p32.data(), n, len, kScale);
    attention_softmax_row_avx512(s.data(), work.data(), r.p16.data(), n, len, kScale);
    attention_softmax_backward_row_avx512(r.p32.data(), dp.data(), r.g32.data(), n, len, kScale);
    attention_softmax_backward_row_avx512(r.p16.data(), dp.data(), r.g16.data(), n, len, kScale);
    attention_softmax_backward_row_avx512(r.p16.data(), dp.data(), r.g_from16.data(), n, len, kScale);
  } else {
    attention_softmax_row(s.data(), work.data(), r.p32.data(), n, len, kScale);
    attention_softmax_row(s.data(), work.data(), r.p16.data(), n, len, kScale);
    attention_softmax_backward_row(r.p32.data(), dp.data(), r.g32.data(), n, len, kScale);
    attention_softmax_backward_row(r.p16.data(), dp.data(), r.g16.data(), n, len, kScale);
    attention_softmax_backward_row(r.p16.data(), dp.data(), r.g_from16.data(), n, len, kScale);
  }
  return r;
}

std::vector<std::pair<std::int64_t, std::int64_t>> lengths_and_visible() {
  std::vector<std::pair<std::int64_t, std::int64_t>> cases;
  for (std::int64_t len : {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 40, 63, 64, 65, 127, 128, 130, 257}) {
    for (std::int64_t n : {std::int64_t{1}, len / 2, len - 1, len}) {
      if (n >= 1) cases.emplace_back(len, n);
    }
  }
  for (std::int64_t len = 1; len <= 40; ++len) cases.emplace_back(len, len);
  return cases;
}

TEST(AttentionRows, ThePlainLoopAndTheAvx512KernelGiveTheSameBits) {
  if (active_isa() < Isa::avx512) GTEST_SKIP() << "no AVX-512 here (or capped): the plain loop is the only one";
  std::mt19937_64 rng(testing::test_seed());
  std::uniform_real_distribution<float> score(-60.0f, 60.0f), grad(-3.0f, 3.0f);
  for (const auto& [len, n] : lengths_and_visible()) {
    std::vector<float> s(static_cast<std::size_t>(len)), dp(s.size());
    for (float& v : s) v = score(rng);
    for (float& v : dp) v = grad(rng);
    const Rows a = run(false, s, dp, n), b = run(true, s, dp, n);
    for (std::size_t j = 0; j < s.size(); ++j) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a.p32[j]), std::bit_cast<std::uint32_t>(b.p32[j])) << len << " " << n << " " << j;
      ASSERT_EQ(a.p16[j], b.p16[j]) << len << " " << n << " " << j;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a.g32[j]), std::bit_cast<std::uint32_t>(b.g32[j])) << len << " " << n << " " << j;
      ASSERT_EQ(a.g16[j], b.g16[j]) << len << " " << n << " " << j;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a.g_from16[j]), std::bit_cast<std::uint32_t>(b.g_from16[j]))
          << len << " " << n << " " << j;
    }
  }
}

// Both kernels (the one this CPU runs, and the plain loop) against softmax and its gradient in double.
// f32: within (16 + n) half-ulps of each probability (exp within an ulp, a sum of n terms), and of the
// gradient's scale * p * (|dp| + |dot|); bf16: the f32 value's rounding adds half a bf16 ulp.
TEST(AttentionRows, BothKernelsAreTheSoftmaxAndItsGradient) {
  std::mt19937_64 rng(testing::test_seed() + 1);
  std::uniform_real_distribution<float> score(-60.0f, 60.0f), grad(-3.0f, 3.0f);
  for (const bool avx512 : {false, active_isa() >= Isa::avx512}) {
    for (const auto& [len, n] : lengths_and_visible()) {
      std::vector<float> s(static_cast<std::size_t>(len)), dp(s.size());
      for (float& v : s) v = score(rng);
      for (float& v : dp) v = grad(rng);
      const Rows r = run(avx512, s, dp, n);
      double mx = -INFINITY, total = 0, dot32 = 0, dot16 = 0;
      for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, double{kScale} * s[j]);
      for (std::int64_t j = 0; j < n; ++j) total += std::exp(double{kScale} * s[j] - mx);
      for (std::int64_t j = 0; j < n; ++j) dot32 += double{r.p32[j]} * dp[j], dot16 += double{widen(r.p16[j])} * dp[j];
      const double tol = (16.0 + static_cast<double>(n)) * kF32Eps;
      for (std::int64_t j = 0; j < len; ++j) {
        const double p = j < n ? std::exp(double{kScale} * s[j] - mx) / total : 0.0;
        EXPECT_NEAR(r.p32[j], p, tol * p + 1e-45) << avx512 << " " << len << " " << n << " " << j;
        EXPECT_NEAR(widen(r.p16[j]), p, (tol + kBf16Eps) * p + 1e-45) << avx512 << " " << len << " " << n << " " << j;
        const double g32 = j < n ? double{kScale} * r.p32[j] * (dp[j] - dot32) : 0.0;
        const double g16 = j < n ? double{kScale} * widen(r.p16[j]) * (dp[j] - dot16) : 0.0;
        const double size32 = j < n ? double{kScale} * r.p32[j] * (std::fabs(dp[j]) + 3.0) : 0.0;
        const double size16 = j < n ? double{kScale} * widen(r.p16[j]) * (std::fabs(dp[j]) + 3.0) : 0.0;
        EXPECT_NEAR(r.g32[j], g32, tol * size32 + 1e-45) << avx512 << " " << len << " " << n << " " << j;
        EXPECT_NEAR(r.g_from16[j], g16, tol * size16 + 1e-45) << avx512 << " " << len << " " << n << " " << j;
        EXPECT_NEAR(widen(r.g16[j]), g16, (tol + kBf16Eps) * size16 + 1e-45) << avx512 << " " << len << " " << n << " " << j;
      }
    }
  }
}

// NaN anywhere a row sees makes its whole visible part NaN (the rest stays 0); -inf scores get 0 and
// the rest still sum to 1; +inf makes the row NaN (inf - inf), as in double; a row that sees no key is
// NaN throughout (0 / 0), its gradient 0.
TEST(AttentionRows, SpecialValuesAsTheDefinition) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const bool avx512 : {false, active_isa() >= Isa::avx512}) {
    for (const std::int64_t len : {5, 16, 21, 40}) {
      std::vector<float> s(static_cast<std::size_t>(len)), dp(s.size(), 0.5f);
      for (std::int64_t j = 0; j < len; ++j) s[j] = static_cast<float>(j % 7) - 3.0f;
      const std::int64_t n = len - 2;
      for (const std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {
        for (const float special : {nan, inf}) {
          std::vector<float> row = s;
          row[at] = special;
          const Rows r = run(avx512, row, dp, n);
          for (std::int64_t j = 0; j < len; ++j) {
            EXPECT_EQ(std::isnan(r.p32[j]), j < n) << avx512 << " " << len << " " << at << " " << j;
            EXPECT_EQ(std::isnan(widen(r.p16[j])), j < n) << avx512 << " " << len << " " << at << " " << j;
            if (j >= n) {
              EXPECT_EQ(r.p32[j], 0.0f);
            }
          }
        }
        std::vector<float> row = s;
        row[at] = -inf;
        const Rows r = run(avx512, row, dp, n);
        double total = 0;
        for (std::int64_t j = 0; j < n; ++j) total += r.p32[j];
        EXPECT_EQ(r.p32[at], 0.0f);
        EXPECT_EQ(r.p16[at], 0);
        EXPECT_NEAR(total, 1.0, 1e-6);
      }
      const Rows none = run(avx512, s, dp, 0);
      for (std::int64_t j = 0; j < len; ++j) {
        EXPECT_TRUE(std::isnan(none.p32[j]) && std::isnan(widen(none.p16[j]))) << j;
        EXPECT_EQ(none.g32[j], 0.0f);
      }
    }
  }
}

}  // namespace
}  // namespace mantissa::detail
