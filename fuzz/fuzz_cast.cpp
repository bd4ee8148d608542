// Fuzzes what `mantissa cast` reads: the format name (Format::parse, which also reads every --dtype and
// --to a user types), and value lines through the command's own parser (tools/mantissa/cast_text.cpp).
// Input: the first line is the format's name, each further line one value. Every value parsed is
// rounded in every mode, with and without saturation, and the result checked against the definitions:
// the bits fit the format, NaN stays NaN (or the largest value, without NaN) and the sign stays, a representable value rounds to itself,
// nearest is no farther than either neighbour, toward zero never grows, stochastic gives one of the
// two values around x.
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "cast_text.h"
#include "fuzz_target.h"
#include "mantissa/numeric/convert.h"

namespace {

using mantissa::fuzz::require;
using mantissa::Format;
using mantissa::Rounding;

// The value one step away in magnitude from `bits` (+1 farther from zero, -1 nearer), or NaN past an end.
double neighbour(Format f, std::uint32_t bits, int step) {
  const std::uint32_t mag = bits & f.magnitude_mask();
  if (step < 0 && mag == 0) return NAN;
  if (step > 0 && mag >= f.max_finite_bits()) return NAN;
  return mantissa::decode(f, (bits & f.sign_bit()) | (mag + static_cast<std::uint32_t>(step)));
}

void check_value(Format f, float x, std::uint64_t index) {
  for (bool saturate : {false, true}) {
    const mantissa::CastOptions zero{Rounding::toward_zero, saturate, 0};
    const std::uint32_t truncated = mantissa::encode(f, x, zero, index);
    for (Rounding r : {Rounding::nearest_even, Rounding::stochastic, Rounding::toward_zero}) {
      const mantissa::CastOptions options{r, saturate, 12345};
      const std::uint32_t bits = mantissa::encode(f, x, options, index);
      require(f.bits() == 32 || bits >> f.bits() == 0, "the bits fit the format");
      const float y = mantissa::decode(f, bits);
      if (std::isnan(x)) {
        // (A format without NaN, e2m1, writes the largest value of NaN's sign.)
        require(f.has_nan() ? std::isnan(y) : bits == (f.max_finite_bits() | (std::signbit(x) ? f.sign_bit() : 0U)),
                "NaN stays NaN");
        continue;
      }
      if (std::isnan(y)) {
        // Without infinity and without saturation, an infinity or an overflow becomes NaN; toward zero
        // never overflows (it stops at the largest finite value), so only an infinity does there.
        require(!f.has_inf() && !saturate && (std::isinf(x) || r != Rounding::toward_zero),
                "NaN only for overflow without infinity");
        continue;
      }
      require(std::signbit(y) == std::signbit(x), "the sign is kept");
      require(mantissa::encode(f, y, options, index) == bits, "a representable value rounds to itself");
      if (std::isinf(x) || std::isinf(y)) continue;
      const double dx = x, dy = y;
      if (r == Rounding::nearest_even) {
        for (int step : {-1, 1}) {
          const double other = neighbour(f, bits, step);
          require(std::isnan(other) || std::fabs(dy - dx) <= std::fabs(other - dx), "nearest is nearest");
        }
      } else if (r == Rounding::toward_zero) {
        require(std::fabs(dy) <= std::fabs(dx), "toward zero never grows");
      } else {
        const float down = mantissa::decode(f, truncated);
        require(y == down || static_cast<double>(y) == neighbour(f, truncated, 1),
                "stochastic gives one of the two values around x");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::size_t eol = text.find('\n');
  const std::string_view name = text.substr(0, eol);
  try {
    (void)mantissa::parse_rounding(name);
  } catch (const std::invalid_argument&) {
  }
  Format format = Format::fp32();
  try {
    format = Format::parse(name);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  require(Format::parse(format.name()) == format, "a format's name parses back to it");
  if (eol == std::string_view::npos) return 0;
  text.remove_prefix(eol + 1);
  std::uint64_t index = 0;
  while (!text.empty() && index < 64) {
    const std::size_t end = text.find('\n');
    const std::optional<float> x = mantissa::cli::parse_fp32(mantissa::cli::trim(text.substr(0, end)));
    if (x) check_value(format, *x, index);
    ++index;
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return 0;
}
