// `mantissa formats`: the properties of every named format (and of any eXmY given), side by side.
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "commands.h"
#include "mantissa/numeric/format.h"

namespace mantissa::cli {
namespace {

std::string number(double v) { return std::isnan(v) ? "-" : fmt::format("{:.6g}", v); }

int print_table(const std::vector<std::string>& extra) {
  std::vector<Format> formats(named_formats().begin(), named_formats().end());
  for (const std::string& name : extra) formats.push_back(Format::parse(name));

  fmt::print("{:<8} {:>4} {:>4} {:>4} {:>5} {:>13} {:>13} {:>13} {:>11} {:>4}  {}\n", "format", "bits",
             "exp", "man", "bias", "max finite", "min normal", "min subnorm", "epsilon", "inf",
             "NaN encoding");
  for (Format f : formats) {
    const FormatTraits t = traits(f);
    fmt::print("{:<8} {:>4} {:>4} {:>4} {:>5} {:>13} {:>13} {:>13} {:>11} {:>4}  {}\n", t.name, t.bits,
               t.exp_bits, t.man_bits, t.bias, number(t.max_finite), number(t.min_normal),
               number(t.min_subnormal), number(t.epsilon), t.has_inf ? "yes" : "no", t.nan_encoding);
  }
  return 0;
}

}  // namespace

Run add_formats(CLI::App& app) {
  auto extra = std::make_shared<std::vector<std::string>>();
  app.add_option("extra", *extra, "More formats to list, as eXmY (e.g. e3m4 e2m1)");
  app.footer(
      "Columns: max finite, smallest normal and smallest subnormal magnitudes; epsilon is the gap "
      "between 1 and the next number. S is the sign bit.");
  return [extra] { return print_table(*extra); };
}

}  // namespace mantissa::cli
