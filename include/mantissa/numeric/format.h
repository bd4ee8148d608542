// Number formats as run-time values.
//
// One description (exponent bits, mantissa bits, what the all-ones exponent means) covers fp32, fp16,
// bf16, both fp8 formats and every emulated eXmY, so the conversion rules are written once and every
// format gets them. Precision is a run-time property in mantissa, never a compile-time typedef: a model
// mixes formats, and researchers try new ones without recompiling.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace mantissa {

// What the all-ones exponent field encodes.
enum class Specials : std::uint8_t {
  ieee,        // infinity (mantissa 0) and NaN (mantissa non-zero), as IEEE 754
  finite_nan,  // no infinity: every all-ones-exponent pattern is a number except S.1..1.1..1, the NaN
               // (OCP FP8 E4M3 "fn"; also any eXm0, whose single all-ones pattern cannot be both)
  none,        // every pattern is a number: no infinity, no NaN (OCP MX FP4 E2M1). Infinities and NaN
               // become the largest finite value of their sign: a format with nothing else to give
};

class Format {
 public:
  static constexpr Format fp32() { return Format(8, 23, Specials::ieee); }
  static constexpr Format fp16() { return Format(5, 10, Specials::ieee); }
  static constexpr Format bf16() { return Format(8, 7, Specials::ieee); }
  static constexpr Format e4m3() { return Format(4, 3, Specials::finite_nan); }
  static constexpr Format e5m2() { return Format(5, 2, Specials::ieee); }
  // OCP MX FP4: 1 sign, 2 exponent, 1 mantissa bit; values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no inf or NaN.
  // Stored one value per byte (low nibble) in memory, packed two per byte in files (pack_fp4()).
  static constexpr Format e2m1() { return Format(2, 1, Specials::none); }
  // OCP MX FP6, the same kind: E2M3 (max 7.5) and E3M2 (max 28), no inf or NaN; one value per byte.
  static constexpr Format e2m3() { return Format(2, 3, Specials::none); }
  static constexpr Format e3m2() { return Format(3, 2, Specials::none); }

  // An IEEE-style format with 1..8 exponent bits and 0..23 mantissa bits (throws std::invalid_argument
  // outside that range). e5m10 is fp16, e8m7 is bf16, e5m2 is fp8 e5m2, e8m23 is fp32.
  static Format emulated(int exp_bits, int man_bits);

  // "fp32", "fp16", "bf16", "e4m3", "e5m2", "e2m1", "e2m3", "e3m2" or "eXmY"; throws std::invalid_argument
  // with a message that names the problem. "e4m3" is always OCP E4M3 (no infinity, max 448), "e2m1" OCP
  // FP4 (max 6), "e2m3" and "e3m2" OCP FP6 (max 7.5 and 28); another eXmY is IEEE-style (emulated()).
  static Format parse(std::string_view name);

  constexpr int exp_bits() const { return exp_bits_; }
  constexpr int man_bits() const { return man_bits_; }
  constexpr Specials specials() const { return specials_; }
  constexpr int bits() const { return 1 + exp_bits_ + man_bits_; }
  constexpr int bias() const { return (1 << (exp_bits_ - 1)) - 1; }
  // Exponent of the smallest normal number (also the scale of the subnormals).
  constexpr int min_exponent() const { return 1 - bias(); }
  constexpr bool has_inf() const { return specials_ == Specials::ieee; }
  constexpr bool has_nan() const { return specials_ != Specials::none; }
  // Bytes one value occupies in memory: 1, 2 or 4.
  constexpr int storage_bytes() const { return bits() <= 8 ? 1 : bits() <= 16 ? 2 : 4; }

  // Bit patterns of the magnitude (sign bit clear).
  constexpr std::uint32_t sign_bit() const { return std::uint32_t{1} << (exp_bits_ + man_bits_); }
  constexpr std::uint32_t magnitude_mask() const { return sign_bit() - 1; }
  constexpr std::uint32_t exponent_mask() const {
    return ((std::uint32_t{1} << exp_bits_) - 1) << man_bits_;
  }
  constexpr std::uint32_t max_finite_bits() const {
    return specials_ == Specials::ieee ? exponent_mask() - 1
           : specials_ == Specials::none ? magnitude_mask()
                                         : magnitude_mask() - 1;
  }
  // The infinity pattern; only meaningful when has_inf().
  constexpr std::uint32_t inf_bits() const { return exponent_mask(); }
  // The canonical quiet NaN: all-ones exponent with the top mantissa bit (ieee), or all ones (finite_nan);
  // for a format without NaN, the largest finite value that NaN is written as.
  constexpr std::uint32_t nan_bits() const {
    return specials_ == Specials::ieee ? exponent_mask() | (std::uint32_t{1} << (man_bits_ - 1))
                                       : magnitude_mask();
  }

  // The name parse() accepts for this format: the well-known name where it has one, else "eXmY".
  std::string name() const;

  friend constexpr bool operator==(const Format&, const Format&) = default;

 private:
  constexpr Format(int e, int m, Specials s)
      : exp_bits_(static_cast<std::uint8_t>(e)), man_bits_(static_cast<std::uint8_t>(m)), specials_(s) {}

  std::uint8_t exp_bits_;
  std::uint8_t man_bits_;
  Specials specials_;
};

// The properties a user compares formats by. Values a format lacks are NaN (min_normal of an e1mY,
// whose only exponent field above zero is the infinity one; min_subnormal of an eXm0).
struct FormatTraits {
  std::string name;
  int bits;
  int exp_bits;
  int man_bits;
  int bias;
  double max_finite;
  double min_normal;
  double min_subnormal;
  double epsilon;  // distance from 1 to the next larger number: 2^-man_bits
  bool has_inf;
  std::string nan_encoding;  // how NaN is written, e.g. "S.11111.xxxxxxxxxx (x != 0)"
};

FormatTraits traits(Format format);

// The formats with well-known names, in the order the formats table lists them.
std::span<const Format> named_formats();

}  // namespace mantissa
