// The GPU cross-entropy's one-read row statistics (src/backend/cuda/online_softmax.h), run on the host
// as a block of threads runs them (each thread folding every T-th element, then the block rescaling and
// adding the threads' sums), against the two-pass definition in double: the log-sum-exp of random rows
// of every length up to 600, with 1, 7 and 256 threads, and the special values (NaN anywhere, +inf, -inf
// among finite values) in every position.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "../../src/backend/cuda/online_softmax.h"

namespace mantissa::detail::cuda {
namespace {

// log sum_j exp(x_j) as the GPU block computes it with `threads` threads.
float online_lse(const std::vector<float>& x, int threads) {
  std::vector<OnlineSum> sums(static_cast<std::size_t>(threads));
  for (std::size_t c = 0; c < x.size(); ++c) online_add(sums[c % static_cast<std::size_t>(threads)], x[c]);
  float row_max = -INFINITY;
  for (const OnlineSum& s : sums) row_max = std::fmax(row_max, s.max);  // block_max: fmaxf
  float total = 0;
  for (const OnlineSum& s : sums) total += rescaled_total(s, row_max);
  return row_max + std::log(total);
}

// The definition, in double: max, then the sum of exp(x - max); NaN where it has a NaN or +inf.
double definition_lse(const std::vector<float>& x) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : x) {
    if (std::isnan(v)) return NAN;
    mx = std::max(mx, static_cast<double>(v));
  }
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(total);
}

TEST(OnlineSoftmax, TheLogSumExpOfRandomRowsMatchesTheDefinition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> spread(0.5f, 60.0f);
  for (int n = 1; n <= 600; n += (n < 40 ? 1 : 37)) {
    for (int threads : {1, 7, 256}) {
      const float scale = spread(rng);
      std::normal_distribution<float> value(0.0f, scale);
      std::vector<float> x(static_cast<std::size_t>(n));
      for (float& v : x) v = value(rng);
      const double want = definition_lse(x);
      // f32: a few roundings of the max-relative terms and of the log, relative to the result's size.
      EXPECT_NEAR(online_lse(x, threads), want, 1e-6 * (std::fabs(want) + std::log(static_cast<double>(n)) + 1))
          << "n " << n << " threads " << threads;
    }
  }
}

TEST(OnlineSoftmax, SpecialValuesGiveWhatTheDefinitionGives) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 3, 9, 300}) {
    for (int threads : {1, 7, 256}) {
      for (int at = 0; at < n; ++at) {
        std::vector<float> x(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(1.7 * i) * 5);
        const std::string where = "n " + std::to_string(n) + " threads " + std::to_string(threads) + " at " + std::to_string(at);
        // A NaN anywhere, even alone in its thread: NaN.
        std::vector<float> y = x;
        y[static_cast<std::size_t>(at)] = NAN;
        EXPECT_TRUE(std::isnan(online_lse(y, threads))) << "NaN, " << where;
        // +inf: NaN (exp(inf - inf)), as the definition.
        y = x;
        y[static_cast<std::size_t>(at)] = inf;
        EXPECT_TRUE(std::isnan(online_lse(y, threads))) << "+inf, " << where;
        // -inf among finite values adds nothing.
        if (n > 1) {
          y = x;
          y[static_cast<std::size_t>(at)] = -inf;
          const double want = definition_lse(y);
          EXPECT_NEAR(online_lse(y, threads), want, 1e-6 * (std::fabs(want) + 10)) << "-inf, " << where;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mantissa::detail::cuda
