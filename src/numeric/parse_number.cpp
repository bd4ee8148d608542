// parse_number (mantissa/numeric/parse_number.h): the grammar is checked here, character by character,
// and std::from_chars (base 10, or the general floating-point format) converts what passed it, so no
// locale, base prefix, leading space or hexadecimal float can slip through a library's own leniency.
// parse_f32_value, the data reader of `mantissa cast`, is strtof on purpose: its values may be hex
// floats and specials.
#include "mantissa/numeric/parse_number.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>

#include "mantissa/base/errors.h"

namespace mantissa {
namespace {

bool digit(char c) { return c >= '0' && c <= '9'; }

// [sign] digits, the sign '-' only where negatives exist.
bool integer_text(std::string_view s, bool negative_allowed) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || (s[i] == '-' && negative_allowed))) ++i;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (!digit(s[i])) return false;
  }
  return true;
}

// [sign] (digits [. digits*] | . digits) [(e|E) [sign] digits]
bool real_text(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::size_t mantissa_digits = 0;
  for (; i < s.size() && digit(s[i]); ++i) ++mantissa_digits;
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && digit(s[i]); ++i) ++mantissa_digits;
  }
  if (mantissa_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    std::size_t exponent_digits = 0;
    for (; i < s.size() && digit(s[i]); ++i) ++exponent_digits;
    if (exponent_digits == 0) return false;
  }
  return i == s.size();
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, double>) return "f64";
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) return sizeof(T) == 4 ? "a 32-bit integer" : "a 64-bit integer";
  if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    return sizeof(T) == 4 ? "a 32-bit unsigned integer" : "a 64-bit unsigned integer";
  }
  return "the type";
}

template <class T>
std::string range_of() {
  if constexpr (std::is_floating_point_v<T>) {
    char low[32], high[32];
    const auto l = std::to_chars(low, low + sizeof low, std::numeric_limits<T>::min());
    const auto h = std::to_chars(high, high + sizeof high, std::numeric_limits<T>::max());
    return "magnitudes 0 or " + std::string(low, l.ptr) + " to " + std::string(high, h.ptr);
  } else {
    return std::to_string(std::numeric_limits<T>::min()) + " to " + std::to_string(std::numeric_limits<T>::max());
  }
}

// (Built by appending: GCC 12 warns, wrongly, of overlapping copies in a chain of + on these strings.)
std::string quoted(std::string_view text, const char* then) {
  std::string s = "'";
  s.append(text);
  s.append(then);
  return s;
}

template <class T>
std::string out_of_range(std::string_view text) {
  std::string s = quoted(text, "' is out of range for ");
  s.append(type_name<T>());
  s.append(" (");
  s.append(range_of<T>());
  s.append(")");
  return s;
}

// The value, or nothing with the reason in `error` (0: not a number, 1: out of range).
template <class T>
bool convert(std::string_view text, T& out, int& error) {
  if constexpr (std::is_integral_v<T>) {
    if (!integer_text(text, std::is_signed_v<T>)) {
      error = 0;
      return false;
    }
    std::string_view digits = text;
    if (digits.front() == '+') digits.remove_prefix(1);  // from_chars takes no '+'
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), out, 10);
    if (r.ec == std::errc::result_out_of_range) {
      error = 1;
      return false;
    }
    return r.ec == std::errc() && r.ptr == digits.data() + digits.size();
  } else {
    if (!real_text(text)) {
      error = 0;
      return false;
    }
    std::string_view digits = text;
    if (digits.front() == '+') digits.remove_prefix(1);
    double v = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, std::chars_format::general);
    if (r.ec == std::errc::result_out_of_range || (r.ec == std::errc() && !std::isfinite(v))) {
      error = 1;
      return false;
    }
    if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
      error = 0;
      return false;
    }
    if constexpr (std::is_same_v<T, float>) {
      // Past f32's range, or a non-zero value that f32 would hold as 0 or a subnormal of few digits.
      if (std::fabs(v) > std::numeric_limits<float>::max() || (v != 0 && std::fabs(v) < std::numeric_limits<float>::min())) {
        error = 1;
        return false;
      }
    }
    out = static_cast<T>(v);
    return true;
  }
}

}  // namespace

template <class T>
std::string number_problem(std::string_view text) {
  T out{};
  int error = 0;
  if (convert(text, out, error)) return {};
  if (error == 1) return out_of_range<T>(text);
  const char* kind = std::is_integral_v<T> ? (std::is_signed_v<T> ? "a decimal integer" : "a decimal integer of at least 0")
                                           : "a finite decimal number";
  std::string s = quoted(text, "' is not ");
  s.append(kind);
  return s;
}

template <class T>
T parse_number(std::string_view text, std::string_view what) {
  T out{};
  int error = 0;
  if (convert(text, out, error)) return out;
  throw UsageError(std::string(what) + ": " + number_problem<T>(text));
}

template <class T>
bool is_number(std::string_view text) {
  T out{};
  int error = 0;
  return convert(text, out, error);
}

std::optional<float> parse_f32_value(std::string_view text) {
  if (text.empty() || text.front() == ' ' || text.front() == '\t' || text.front() == '\n') return std::nullopt;
  const std::string s(text);  // strtof needs the terminating zero; an embedded one ends the number early
  if (s.find('\0') != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const float v = std::strtof(s.c_str(), &end);  // hex floats, inf and nan included, rounded once
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

#define MANTISSA_PARSE_NUMBER(T)                                  \
  template T parse_number<T>(std::string_view, std::string_view); \
  template bool is_number<T>(std::string_view);                \
  template std::string number_problem<T>(std::string_view);
MANTISSA_PARSE_NUMBER(int)
MANTISSA_PARSE_NUMBER(long)
MANTISSA_PARSE_NUMBER(long long)
MANTISSA_PARSE_NUMBER(unsigned)
MANTISSA_PARSE_NUMBER(unsigned long)
MANTISSA_PARSE_NUMBER(unsigned long long)
MANTISSA_PARSE_NUMBER(float)
MANTISSA_PARSE_NUMBER(double)
#undef MANTISSA_PARSE_NUMBER

}  // namespace mantissa
