// Stochastic rounding: reproducible from the seed, unbiased, and rounding down with probability
// (upper neighbour - x) / ulp, checked with binomial bounds of six standard deviations.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mantissa/numeric/convert.h"
#include "test_support.h"

namespace mantissa {
namespace {

constexpr int kDraws = 200'000;
constexpr double kSigmas = 6.0;

// Fraction of kDraws roundings of x (counters 0..kDraws-1) that give the lower neighbour.
double observed_down(Format f, float x, std::uint64_t seed, double& mean) {
  const float down = round_to(f, x, {Rounding::toward_zero});  // x > 0: the lower neighbour
  int downs = 0;
  double sum = 0;
  for (int i = 0; i < kDraws; ++i) {
    const float r = round_to(f, x, {Rounding::stochastic, false, seed}, static_cast<std::uint64_t>(i));
    downs += r == down ? 1 : 0;
    sum += static_cast<double>(r);
  }
  mean = sum / kDraws;
  return static_cast<double>(downs) / kDraws;
}

class Stochastic : public ::testing::TestWithParam<Format> {};

TEST_P(Stochastic, RoundsDownWithTheDistanceToTheUpperNeighbourOverTheUlp) {
  MANTISSA_TRACE_SEED();
  const Format f = GetParam();
  const testing::Reference ref(testing::ref_of(f));
  const testing::RefFormat& r = ref.format();
  // Positions inside intervals: normal, subnormal, near the top of the range; fractions 1/8 .. 7/8.
  const double max = r.formula(r.max_finite());
  std::vector<float> xs;
  for (double frac : {0.125, 0.3, 0.5, 0.71, 0.875}) {
    const double base_normal = std::ldexp(1.0, std::min(0, r.emin() + 2));
    const double ulp_normal = base_normal * std::ldexp(1.0, -r.man_bits);
    xs.push_back(static_cast<float>(base_normal + frac * ulp_normal));
    const double sub_ulp = std::ldexp(1.0, r.emin() - r.man_bits);
    xs.push_back(static_cast<float>(sub_ulp * (1 + frac)));
    xs.push_back(static_cast<float>(max - frac * (max - r.formula(r.max_finite() - 1))));
  }
  for (float x : xs) {
    if (!std::isfinite(x) || static_cast<double>(x) > max) continue;
    const double p = ref.probability_down(x);
    double mean = 0;
    const double got = observed_down(f, x, testing::test_seed(), mean);
    const double sd = std::sqrt(p * (1 - p) / kDraws);
    EXPECT_NEAR(got, p, kSigmas * sd + 1e-12) << f.name() << " x=" << x;
    // Unbiased: the mean of the roundings is x, within the spread of the two neighbours.
    std::uint32_t lo = 0;
    std::uint32_t hi = 0;
    ref.neighbours(static_cast<double>(x), lo, hi);
    const double gap = r.formula(hi) - r.formula(lo);
    EXPECT_NEAR(mean, static_cast<double>(x), kSigmas * gap * std::sqrt(p * (1 - p) / kDraws) + 1e-300)
        << f.name() << " x=" << x;
  }
}

TEST_P(Stochastic, SameSeedSameBitsOtherSeedOtherBits) {
  const Format f = GetParam();
  const std::vector<float> x = testing::sample_fp32(f, 10'000, 42);
  const auto run = [&](std::uint64_t seed) {
    std::vector<std::uint32_t> v(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) v[i] = encode(f, x[i], {Rounding::stochastic, false, seed}, i);
    return v;
  };
  EXPECT_EQ(run(7), run(7));
  if (f.man_bits() >= 2) {
    EXPECT_NE(run(7), run(8));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Stochastic,
                         ::testing::Values(Format::fp16(), Format::bf16(), Format::e4m3(), Format::e5m2(),
                                           Format::emulated(3, 4), Format::emulated(8, 0),
                                           Format::emulated(6, 9)),
                         testing::format_label);

TEST(StochasticBits, AreUniformAcrossBitsAndIndices) {
  // Each of the 32 bits is set in half the draws, and neighbouring counters are uncorrelated.
  constexpr int n = 1 << 20;
  int ones[32] = {};
  int equal_low_bytes = 0;
  std::uint32_t prev = stochastic_bits(1, 0);
  for (int i = 1; i <= n; ++i) {
    const std::uint32_t r = stochastic_bits(1, static_cast<std::uint64_t>(i));
    for (int b = 0; b < 32; ++b) ones[b] += (r >> b) & 1;
    equal_low_bytes += (r & 0xff) == (prev & 0xff) ? 1 : 0;
    prev = r;
  }
  const double sd = std::sqrt(n * 0.25);
  for (int b = 0; b < 32; ++b) EXPECT_NEAR(ones[b], n / 2.0, kSigmas * sd) << "bit " << b;
  EXPECT_NEAR(equal_low_bytes, n / 256.0, kSigmas * std::sqrt(n / 256.0));
}

}  // namespace
}  // namespace mantissa
