// The one parser of numbers written as text: every command-line flag (tools/mantissa/number_flags.h
// routes CLI11's), configuration and checkpoint metadata, the digits of a format's name. One home, so
// that a number means the same everywhere:
// - decimal only: "010" is ten (never eight), "0x10" and "0x1p-3" are errors, as are spaces, an empty
//   text and anything after the number ("5abc", "1e-3x");
// - integers are digits with an optional sign (no '-' for an unsigned type), no fraction or exponent;
// - reals are [sign] digits [. digits] [e [sign] digits] and finite ("inf" and "nan" are errors);
// - the value must fit the type it is parsed into: an int64 past 2^63, or an f32 of 1e-300 (which would
//   be 0) or 1e39 (which would be inf), is an error saying the range.
// Errors are UsageError (mantissa/base/errors.h, a std::invalid_argument): "<what>: '<text>' is not a
// decimal number" (or "... is out of range for <type> (<min> to <max>)"). A reader that parses a number
// out of a file turns that into its own kind, naming the file (rethrow_as).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mantissa {

// T: int, long, long long, unsigned, unsigned long, unsigned long long, float or double.
template <class T>
T parse_number(std::string_view text, std::string_view what);

// The same rules as a check: whether text is a number parse_number<T> accepts; and what is wrong with
// it ("'010x' is not a decimal integer"), empty where nothing is.
template <class T>
bool is_number(std::string_view text);
template <class T>
std::string number_problem(std::string_view text);

// A value to round, read as data rather than as a setting (what `mantissa cast` reads): everything
// parse_number<double> takes, and also hexadecimal floats (0x1.8p3), inf, -inf and nan, rounded to the
// nearest f32 (past f32's range: inf, 0 or a subnormal, as a cast rounds). nullopt for anything else
// (spaces and trailing text included).
std::optional<float> parse_f32_value(std::string_view text);

}  // namespace mantissa
