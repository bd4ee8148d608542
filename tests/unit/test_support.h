// Shared by the number-format tests: the formats every test runs over, the seed of their random inputs
// (fixed; MANTISSA_TEST_SEED replays another or draws a fresh one: ../common/test_seed.h), and fp32
// sample generators.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "mantissa/numeric/format.h"
#include "reference_format.h"
#include "../common/test_seed.h"

namespace mantissa {
// Test names and messages show a format by its name.
inline void PrintTo(const Format& f, std::ostream* os) { *os << f.name(); }
}  // namespace mantissa

namespace mantissa::testing {

inline RefFormat ref_of(Format f) { return {f.exp_bits(), f.man_bits(), f.has_inf()}; }

// Named formats, then emulated ones chosen to reach every corner: 1 exponent bit (subnormals only),
// no mantissa bits (NaN instead of infinity), 8 exponent bits (fp32's subnormals), widths past 16 bits.
inline std::vector<Format> formats_under_test() {
  // (e2m1, with no NaN to keep NaN in, has its own exhaustive test: microscale_test.cpp.)
  std::vector<Format> v;
  for (Format f : named_formats()) {
    if (f.has_nan()) v.push_back(f);
  }
  for (auto [e, m] : {std::pair{1, 0}, {1, 2}, {1, 6}, {2, 1}, {2, 3}, {3, 2}, {3, 4}, {4, 3}, {5, 0},
                      {6, 1}, {7, 0}, {8, 0}, {8, 2}, {4, 11}, {6, 9}, {8, 10}, {5, 20}, {7, 23}}) {
    v.push_back(Format::emulated(e, m));
  }
  return v;
}

inline std::string format_label(const ::testing::TestParamInfo<Format>& info) {
  std::string name = info.param.name();
  if (info.param == Format::emulated(4, 3)) name = "e4m3ieee";
  return name;
}

// A recipe's name as a test's name (GoogleTest takes letters, digits and '_': "nvfp4-torchao" ->
// "nvfp4_torchao").
template <class Recipe>
std::string recipe_label(const ::testing::TestParamInfo<Recipe>& info) {
  std::string name(info.param.name());
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}

#define MANTISSA_TRACE_SEED() \
  SCOPED_TRACE("random seed " + std::to_string(::mantissa::testing::test_seed()) + \
               " (MANTISSA_TEST_SEED=N replays a seed, =random draws one)")

// n fp32 values: a third any bit pattern (NaNs, infinities, subnormals included), the rest
// log-uniform across the format's range and a little past it, with random signs.
inline std::vector<float> sample_fp32(Format f, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const RefFormat r = ref_of(f);
  const int lo_exp = r.emin() - r.man_bits - 3;
  const int hi_exp = std::min(r.emin() + (1 << r.exp_bits) + 1, 128);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::uniform_real_distribution<double> exponent(lo_exp, hi_exp);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 3 == 0) {
      v[i] = std::bit_cast<float>(any_bits(rng));
    } else {
      const double x = std::exp2(exponent(rng));
      v[i] = static_cast<float>((rng() & 1) ? -x : x);
    }
  }
  return v;
}

}  // namespace mantissa::testing
