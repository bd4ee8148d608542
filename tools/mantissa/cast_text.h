// The text side of `mantissa cast`: reading one fp32 value from a line and printing one back. Kept apart
// from the command so that the fuzz target (fuzz/fuzz_cast.cpp) runs the very parser users run.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mantissa::cli {

// The line without its leading and trailing blanks (spaces, tabs, carriage returns).
std::string_view trim(std::string_view s);

// Decimal, hex float (0x1.8p3), inf, -inf or nan, rounded to the nearest fp32; nothing else on the line.
// Values out of fp32's range become inf or 0 (or a subnormal), as rounding to fp32 gives.
std::optional<float> parse_fp32(std::string_view text);

// The shortest decimal that reads back as the same fp32 ("nan", "inf", "-inf" for the specials).
std::string shortest(float v);

}  // namespace mantissa::cli
