// An independent reference for rounding, written from the definitions alone and sharing no code with
// the library: every representable value is listed from the IEEE 754 (or OCP fn) formula in double,
// and the rounded value of x is found by searching that list (nearest, ties to the even pattern).
// Formats wider than 16 bits are too many to list; for them the neighbours come from the quantum
// 2^(max(floor(log2|x|), emin) - M) instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace mantissa::testing {

struct RefFormat {
  int exp_bits;
  int man_bits;
  bool has_inf;  // IEEE specials; false: only the all-ones pattern is NaN (OCP "fn", and eXm0)

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  std::uint32_t sign_bit() const { return std::uint32_t{1} << (exp_bits + man_bits); }
  std::uint32_t all_ones_exp() const { return (std::uint32_t{1} << exp_bits) - 1; }

  // The value of a magnitude pattern by the formula, ignoring what specials the pattern may be.
  double formula(std::uint32_t mag) const {
    const std::uint32_t e = mag >> man_bits;
    const double m = static_cast<double>(mag & ((std::uint32_t{1} << man_bits) - 1));
    const double frac = std::ldexp(m, -man_bits);
    if (e == 0) return std::ldexp(frac, emin());
    return std::ldexp(1.0 + frac, static_cast<int>(e) - bias());
  }
  bool is_nan(std::uint32_t mag) const {
    const std::uint32_t e = mag >> man_bits;
    const std::uint32_t m = mag & ((std::uint32_t{1} << man_bits) - 1);
    if (has_inf) return e == all_ones_exp() && m != 0;
    return mag == sign_bit() - 1;
  }
  bool is_inf(std::uint32_t mag) const { return has_inf && mag == all_ones_exp() << man_bits; }
  std::uint32_t max_finite() const {
    return has_inf ? (all_ones_exp() << man_bits) - 1 : sign_bit() - 2;
  }
  double decode(std::uint32_t bits) const {
    const std::uint32_t mag = bits & (sign_bit() - 1);
    const double s = (bits & sign_bit()) ? -1.0 : 1.0;
    if (is_nan(mag)) return std::numeric_limits<double>::quiet_NaN();
    if (is_inf(mag)) return s * std::numeric_limits<double>::infinity();
    return s * formula(mag);
  }
};

enum class RefRounding { nearest_even, toward_zero };

class Reference {
 public:
  explicit Reference(RefFormat f) : f_(f) {
    if (f.exp_bits + f.man_bits <= 16) {
      for (std::uint32_t mag = 0; mag <= f.max_finite(); ++mag) values_.push_back(f.formula(mag));
    }
  }
  const RefFormat& format() const { return f_; }

  // The two representable magnitudes around |x| (equal if exact), as patterns. hi may be
  // max_finite() + 1, the pattern just past the largest finite value, whose value formula() gives.
  void neighbours(double ax, std::uint32_t& lo, std::uint32_t& hi) const {
    if (ax == 0) {
      lo = hi = 0;
      return;
    }
    if (!values_.empty()) {
      const auto it = std::lower_bound(values_.begin(), values_.end(), ax);
      hi = static_cast<std::uint32_t>(it - values_.begin());
      lo = (it != values_.end() && *it == ax) ? hi : hi - 1;
      return;
    }
    int e = 0;
    std::frexp(ax, &e);  // ax = frac * 2^e with frac in [0.5, 1): floor(log2 ax) = e - 1
    const int q = std::max(e - 1, f_.emin()) - f_.man_bits;
    const double count = std::floor(std::ldexp(ax, -q));
    const auto pattern = [&](double c) {  // quanta count at exponent q -> pattern
      return static_cast<std::uint32_t>(
          (static_cast<std::uint64_t>(std::max(e - 1, f_.emin()) - f_.emin()) << f_.man_bits) +
          static_cast<std::uint64_t>(c));
    };
    lo = pattern(count);
    hi = std::ldexp(count, q) == ax ? lo : pattern(count + 1);
  }

  // The expected pattern of encode(x) under the rounding; NaN inputs give the format's NaN test.
  std::uint32_t round(float x, RefRounding r, bool saturate) const {
    const std::uint32_t sign = std::signbit(x) ? f_.sign_bit() : 0;
    const double ax = std::fabs(static_cast<double>(x));
    const std::uint32_t overflow = saturate ? f_.max_finite()
                                   : f_.has_inf ? f_.all_ones_exp() << f_.man_bits
                                                : f_.sign_bit() - 1;
    if (std::isinf(ax)) return sign | overflow;
    std::uint32_t lo = 0;
    std::uint32_t hi = 0;
    if (ax > f_.formula(f_.max_finite())) {
      lo = f_.max_finite();
      hi = lo + 1;
    } else {
      neighbours(ax, lo, hi);
    }
    std::uint32_t pick;
    if (r == RefRounding::toward_zero) {
      pick = std::min(lo, f_.max_finite());
    } else {
      const double dlo = ax - f_.formula(lo);
      const double dhi = f_.formula(hi) - ax;
      pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    }
    if (pick > f_.max_finite()) pick = overflow;
    return sign | pick;
  }

  // Probability that stochastic rounding of x (finite, within range) gives the lower neighbour.
  double probability_down(float x) const {
    const double ax = std::fabs(static_cast<double>(x));
    std::uint32_t lo = 0;
    std::uint32_t hi = 0;
    neighbours(ax, lo, hi);
    if (lo == hi) return 1.0;
    return (f_.formula(hi) - ax) / (f_.formula(hi) - f_.formula(lo));
  }

 private:
  RefFormat f_;
  std::vector<double> values_;  // every finite magnitude, ascending, indexed by its pattern
};

}  // namespace mantissa::testing
