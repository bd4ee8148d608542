// Reading and printing the fp32 values of `mantissa cast` (see cast_text.h).
#include "cast_text.h"

#include <charconv>
#include <cmath>

#include "mantissa/numeric/parse_number.h"

namespace mantissa::cli {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

std::optional<float> parse_fp32(std::string_view text) { return parse_f32_value(text); }

std::string shortest(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

}  // namespace mantissa::cli
