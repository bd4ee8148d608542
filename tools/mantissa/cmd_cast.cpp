// `mantissa cast`: rounds fp32 values from standard input into a format and shows the result and its
// bits, one line per value. A line that is not a number stops the run with status 2; the lines before
// it have been written whole, and nothing of the bad line is.
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "cast_text.h"
#include "commands.h"
#include "mantissa/numeric/convert.h"

namespace mantissa::cli {
namespace {

// A value's line is short; one past this many bytes (standard input from /dev/zero, a binary file) is
// refused instead of read until memory runs out.
constexpr std::size_t kMaxLineBytes = 4096;

// The next line of standard input without its newline, in `line`; false at the end of the input.
// Throws past kMaxLineBytes.
bool next_line(std::string& line, std::uint64_t line_number) {
  line.clear();
  for (int c; (c = std::getchar()) != EOF;) {
    if (c == '\n') return true;
    if (line.size() == kMaxLineBytes) {
      throw std::invalid_argument("cast: line " + std::to_string(line_number + 1) + " of the input is longer than " +
                                  std::to_string(kMaxLineBytes) + " bytes (one value a line)");
    }
    line.push_back(static_cast<char>(c));
  }
  return !line.empty();
}

struct CastArgs {
  std::string to;
  std::string round = "nearest";
  std::uint64_t seed = 0;
  bool saturate = false;
};

int run_cast(const CastArgs& args) {
  const Format format = Format::parse(args.to);
  const CastOptions options{parse_rounding(args.round), args.saturate, args.seed};
  const int hex_digits = (format.bits() + 3) / 4;

  std::string line;
  std::uint64_t line_number = 0;
  while (next_line(line, line_number)) {
    const std::string_view text = trim(line);
    const std::optional<float> x = parse_fp32(text);
    if (!x) {
      std::fflush(stdout);
      std::fprintf(stderr, "mantissa cast: line %llu: '%.*s' is not a number\n",
                   static_cast<unsigned long long>(line_number + 1), static_cast<int>(text.size()),
                   text.data());
      return kBadInput;
    }
    const std::uint32_t bits = encode(format, *x, options, line_number);
    const std::string out = std::string(text) + '\t' + shortest(decode(format, bits)) + '\t' +
                            [&] {
                              char hex[16];
                              std::snprintf(hex, sizeof hex, "0x%0*x", hex_digits, bits);
                              return std::string(hex);
                            }() +
                            '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
    ++line_number;
  }
  return 0;
}

}  // namespace

Run add_cast(CLI::App& app) {
  auto args = std::make_shared<CastArgs>();
  app.add_option("--to", args->to, "Format to round into: fp32, fp16, bf16, e4m3, e5m2 or eXmY")
      ->required();
  app.add_option("--round", args->round, "Rounding: nearest (ties to even), stochastic or zero")
      ->capture_default_str();
  app.add_option("--seed", args->seed,
                 "Seed of stochastic rounding; line N (from 0) uses counter N, so runs repeat")
      ->capture_default_str();
  app.add_flag("--saturate", args->saturate,
               "Values past the largest finite number (infinities too) become it, not inf or NaN");
  app.footer(
      "Reads one fp32 value per line from standard input (decimal, hex float such as 0x1.8p3, inf, "
      "-inf, nan) and writes: the input, the rounded value as the shortest decimal that reads back as "
      "the same fp32, and its bit pattern in hex.");
  return [args] { return run_cast(*args); };
}

}  // namespace mantissa::cli
