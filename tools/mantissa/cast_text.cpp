// Reading and printing the fp32 values of `mantissa cast` (see cast_text.h).
#include "cast_text.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace mantissa::cli {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

std::optional<float> parse_fp32(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const std::string s(text);  // strtof needs the terminating zero; an embedded one ends the number early
  if (s.find('\0') != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const float v = std::strtof(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::string shortest(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

}  // namespace mantissa::cli
