// The one parser of numbers (mantissa/numeric/parse_number.h): its grammar on a table of accepted and
// refused texts, the exact boundaries of every type, round trips of random values, and the mechanism's
// other half: no other number parser (stoll, stod, strtol, from_chars, atoi, sscanf) in the sources.
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "mantissa/numeric/parse_number.h"
#include "source_scan.h"
#include "test_support.h"

namespace mantissa {
namespace {

template <class T>
void expect_refused(const std::string& text, const char* why) {
  try {
    (void)parse_number<T>(text, "--flag");
    ADD_FAILURE() << "'" << text << "' was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("--flag: '" + text + "' ", 0), 0U) << m;
    EXPECT_NE(m.find(why), std::string::npos) << m;
  }
  EXPECT_FALSE(is_number<T>(text)) << text;
}

TEST(ParseNumber, IntegersAreDecimalDigitsWithASign) {
  EXPECT_EQ(parse_number<std::int64_t>("010", "x"), 10);  // ten, never eight
  EXPECT_EQ(parse_number<std::int64_t>("0", "x"), 0);
  EXPECT_EQ(parse_number<std::int64_t>("+7", "x"), 7);
  EXPECT_EQ(parse_number<std::int64_t>("-0042", "x"), -42);
  EXPECT_EQ(parse_number<std::uint64_t>("00", "x"), 0U);
  for (const char* bad : {"", " 5", "5 ", "0x10", "1e2", "1.0", "5abc", "--5", "+", "-", "1_000", "１", "0b1", "inf"}) {
    expect_refused<std::int64_t>(bad, "is not a decimal integer");
  }
  for (const char* bad : {"-1", "-0", " 1", "0x1"}) expect_refused<std::uint64_t>(bad, "is not a decimal integer of at least 0");
}

TEST(ParseNumber, IntegersFitTheirTypeToTheLastValue) {
  EXPECT_EQ(parse_number<std::int64_t>("9223372036854775807", "x"), INT64_MAX);
  EXPECT_EQ(parse_number<std::int64_t>("-9223372036854775808", "x"), INT64_MIN);
  expect_refused<std::int64_t>("9223372036854775808", "out of range for a 64-bit integer");
  expect_refused<std::int64_t>("-9223372036854775809", "out of range");
  EXPECT_EQ(parse_number<std::uint64_t>("18446744073709551615", "x"), UINT64_MAX);
  expect_refused<std::uint64_t>("18446744073709551616", "out of range for a 64-bit unsigned integer");
  EXPECT_EQ(parse_number<int>("2147483647", "x"), INT32_MAX);
  EXPECT_EQ(parse_number<int>("-2147483648", "x"), INT32_MIN);
  expect_refused<int>("2147483648", "out of range for a 32-bit integer (-2147483648 to 2147483647)");
  expect_refused<unsigned>("4294967296", "out of range for a 32-bit unsigned integer");
  expect_refused<int>("99999999999999999999999999", "out of range");
}

TEST(ParseNumber, RealsAreFiniteDecimalsThatFitTheirType) {
  EXPECT_EQ(parse_number<double>("3e-4", "x"), 3e-4);
  EXPECT_EQ(parse_number<double>("-.5", "x"), -0.5);
  EXPECT_EQ(parse_number<double>("5.", "x"), 5.0);
  EXPECT_EQ(parse_number<double>("+1E+3", "x"), 1000.0);
  EXPECT_EQ(parse_number<double>("007.25", "x"), 7.25);
  EXPECT_TRUE(std::signbit(parse_number<double>("-0", "x")));
  for (const char* bad : {"", ".", "e5", "1e", "1e+", "0x1p-3", "inf", "-inf", "nan", "NaN", "1e-3x", " 1", "1 ", "1,5",
                          "1..2", "--1", "1e5.5", "infinity"}) {
    expect_refused<double>(bad, "is not a finite decimal number");
  }
  expect_refused<double>("1e400", "out of range for f64");
  expect_refused<double>("1e-400", "out of range for f64");
  // f32: what it would hold as inf, 0 or a subnormal is refused (a loss scale of 1e-300 would be 0).
  EXPECT_EQ(parse_number<float>("3.4028234e38", "x"), std::numeric_limits<float>::max());
  EXPECT_EQ(parse_number<float>("1.1754944e-38", "x"), std::numeric_limits<float>::min());
  EXPECT_EQ(parse_number<float>("0", "x"), 0.0f);
  for (const char* bad : {"3.5e38", "1e39", "1e-300", "1e-40", "-1e-45"}) expect_refused<float>(bad, "out of range for f32");
}

TEST(ParseNumber, EveryValueComesBackFromItsShortestDecimal) {
  MANTISSA_TRACE_SEED();
  std::mt19937_64 rng(testing::test_seed());
  for (int i = 0; i < 20000; ++i) {
    const auto v = static_cast<std::int64_t>(rng());
    ASSERT_EQ(parse_number<std::int64_t>(std::to_string(v), "x"), v);
    const std::uint64_t u = rng();
    ASSERT_EQ(parse_number<std::uint64_t>(std::to_string(u), "x"), u);
    double d = 0;
    do {
      const std::uint64_t bits = rng();
      std::memcpy(&d, &bits, sizeof d);
    } while (!std::isfinite(d) || (d != 0 && std::fabs(d) < std::numeric_limits<double>::min()));
    char buf[40];
    const auto r = std::to_chars(buf, buf + sizeof buf, d);
    ASSERT_EQ(parse_number<double>(std::string(buf, r.ptr), "x"), d) << std::string(buf, r.ptr);
  }
}

// The mechanism: no file of the library, the command or the benchmarks parses a number any other way.
TEST(ParseNumber, NoOtherParserOfNumbersInTheSources) {
  const testing::SourceScan scan = testing::scan_sources(
      {"stoi", "stol", "stoll", "stoul", "stoull", "stof", "stod", "stold", "strtol", "strtoll", "strtoul", "strtoull",
       "strtof", "strtod", "atoi", "atol", "atoll", "atof", "sscanf", "from_chars"},
      true, {"src/numeric/parse_number.cpp"});
  EXPECT_GT(scan.files, 100);
  for (const std::string& m : scan.matches) ADD_FAILURE() << m << " (parse through parse_number)";
  // Numbers in JSON documents read back: through json_number, never nlohmann's get<T>() of a number. An
  // allow-list (strings and booleans), since a list of the numeric types missed get<Shape> and
  // get<std::vector<std::uint64_t>> in the safetensors reader, where a data offset of 2e54 was cast.
  const testing::SourceScan json = testing::scan_sources({"get"}, false, {"include/mantissa/io/json_number.h"}, [](std::string_view s) {
    // nlohmann's get<T>() takes no arguments (a kernel's get<X>(ptr, i) is another function).
    const std::size_t args = s.find(">(");
    if (s.substr(0, 4) != "get<" || args == std::string_view::npos || s.substr(args, 3) != ">()") return false;
    return s.substr(0, 16) != "get<std::string>" && s.substr(0, 9) != "get<bool>";
  });
  for (const std::string& m : json.matches) ADD_FAILURE() << m << " (read JSON numbers through json_number)";
}

}  // namespace
}  // namespace mantissa
