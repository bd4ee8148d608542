// `mantissa formats`: the properties of every named format (and of any eXmY given), side by side, and
// the quantization recipes of the products (mantissa/numeric/recipes.h's table), each operand's spec as
// the products take it.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "commands.h"
#include "mantissa/numeric/format.h"
#include "mantissa/numeric/recipes.h"
#include "mantissa/ops/fp8.h"

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
  // The recipes with their defaults (--fp8-format hybrid, --mx-scale rceil), as the products run them,
  // then what each needs of the machine.
  // (Each column as wide as its widest entry.)
  std::vector<std::array<std::string, 5>> rows{{"recipe", "input", "weight", "output gradient", "what it is"}};
  std::vector<std::pair<std::string_view, std::string>> needs;  // a need, the recipes with it
  for (const QuantRecipe r : QuantRecipe::all()) {
    const QuantOptions o{.recipe = r};
    rows.push_back({std::string(r.name()), o.spec(Fp8Operand::input).str(), o.spec(Fp8Operand::weight).str(),
                    o.spec(Fp8Operand::grad_output).str(), std::string(r.info().summary)});
    const auto same = std::find_if(needs.begin(), needs.end(), [&](const auto& n) { return n.first == r.info().needs; });
    if (same == needs.end()) {
      needs.emplace_back(r.info().needs, r.name());
    } else {
      same->second.append(", ").append(r.name());
    }
  }
  std::array<std::size_t, 4> width{};
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  fmt::print("\n");
  for (const auto& row : rows) {
    fmt::print("{:<{}} {:<{}} {:<{}} {:<{}} {}\n", row[0], width[0], row[1], width[1], row[2], width[2], row[3], width[3], row[4]);
  }
  for (const auto& [need, names] : needs) fmt::print("{} run on {}\n", names, need);
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
