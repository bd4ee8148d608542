// Names, parsing and the traits table of the number formats.
#include "mantissa/numeric/format.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/rounding.h"
#include "mantissa/numeric/parse_number.h"

namespace mantissa {
namespace {

constexpr std::array kNamed = {Format::fp32(), Format::fp16(), Format::bf16(), Format::e4m3(),
                               Format::e5m2(), Format::e2m1(), Format::e2m3(), Format::e3m2()};
constexpr std::array<std::string_view, kNamed.size()> kNames = {"fp32", "fp16", "bf16", "e4m3", "e5m2", "e2m1", "e2m3", "e3m2"};

bool parse_int(std::string_view s, int& out) {
  if (s.empty() || s.size() > 2 || s.front() == '+' || s.front() == '-' || !is_number<int>(s)) return false;
  out = parse_number<int>(s, "format");
  return true;
}

}  // namespace

Format Format::emulated(int exp_bits, int man_bits) {
  if (exp_bits < 1 || exp_bits > 8) {
    throw std::invalid_argument("exponent bits must be 1 to 8, got " + std::to_string(exp_bits));
  }
  if (man_bits < 0 || man_bits > 23) {
    throw std::invalid_argument("mantissa bits must be 0 to 23, got " + std::to_string(man_bits));
  }
  // With no mantissa bits the all-ones exponent has one pattern, which cannot be both infinity and
  // NaN; it is NaN, so that NaN stays NaN in every format.
  return Format(exp_bits, man_bits, man_bits == 0 ? Specials::finite_nan : Specials::ieee);
}

Format Format::parse(std::string_view name) {
  for (std::size_t i = 0; i < kNamed.size(); ++i) {
    if (name == kNames[i]) return kNamed[i];
  }
  const auto m = name.find('m');
  int e = 0;
  int mb = 0;
  if (name.size() >= 4 && name[0] == 'e' && m != std::string_view::npos &&
      parse_int(name.substr(1, m - 1), e) && parse_int(name.substr(m + 1), mb)) {
    if (e == 4 && mb == 3) return e4m3();
    if (e == 2 && mb == 1) return e2m1();
    if (e == 2 && mb == 3) return e2m3();
    if (e == 3 && mb == 2) return e3m2();
    try {
      return emulated(e, mb);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("format '" + std::string(name) + "': " + error.what());
    }
  }
  throw std::invalid_argument("unknown format '" + std::string(name) +
                              "' (expected fp32, fp16, bf16, e4m3, e5m2, e2m1, e2m3, e3m2 or eXmY)");
}

std::string Format::name() const {
  for (std::size_t i = 0; i < kNamed.size(); ++i) {
    if (*this == kNamed[i]) return std::string(kNames[i]);
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "e%dm%d", exp_bits_, man_bits_);
  return buf;
}

std::span<const Format> named_formats() { return kNamed; }

FormatTraits traits(Format f) {
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  const auto value = [f](std::uint32_t bits) { return static_cast<double>(decode(f, bits)); };
  const std::uint32_t min_normal_bits = std::uint32_t{1} << f.man_bits();
  const bool has_normal = min_normal_bits <= f.max_finite_bits();

  // "S." then the exponent field, then the mantissa field: x where any non-zero payload will do.
  std::string nan = f.has_nan() ? "S." : "none";
  if (f.has_nan()) nan.append(static_cast<std::size_t>(f.exp_bits()), '1');
  if (f.has_nan() && f.man_bits() > 0) {
    nan.push_back('.');
    nan.append(static_cast<std::size_t>(f.man_bits()), f.has_inf() ? 'x' : '1');
  }
  if (f.has_inf()) nan.append(" (x != 0)");
  return FormatTraits{
      .name = f.name(),
      .bits = f.bits(),
      .exp_bits = f.exp_bits(),
      .man_bits = f.man_bits(),
      .bias = f.bias(),
      .max_finite = value(f.max_finite_bits()),
      .min_normal = has_normal ? value(min_normal_bits) : kNone,
      .min_subnormal = f.man_bits() > 0 ? value(1) : kNone,
      .epsilon = std::ldexp(1.0, -f.man_bits()),
      .has_inf = f.has_inf(),
      .nan_encoding = nan,
  };
}

Rounding parse_rounding(std::string_view name) {
  if (name == "nearest") return Rounding::nearest_even;
  if (name == "stochastic") return Rounding::stochastic;
  if (name == "zero") return Rounding::toward_zero;
  throw std::invalid_argument("unknown rounding '" + std::string(name) +
                              "' (expected nearest, stochastic or zero)");
}

std::string_view rounding_name(Rounding r) {
  switch (r) {
    case Rounding::nearest_even: return "nearest";
    case Rounding::stochastic: return "stochastic";
    case Rounding::toward_zero: return "zero";
  }
  return "?";
}

}  // namespace mantissa
