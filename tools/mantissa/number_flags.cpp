// route_number_flags (number_flags.h): a CLI11 transform on every numeric option.
#include "number_flags.h"

#include <charconv>
#include <string>

#include "mantissa/numeric/parse_number.h"

namespace mantissa::cli {
namespace {

enum class Kind { none, signed_integer, unsigned_integer, real };

// The value kind from CLI11's type name ("INT", "UINT", "FLOAT"; a vector's elements have the same).
Kind kind_of(const CLI::Option& opt) {
  const std::string t = opt.get_type_name();
  const std::string head = t.substr(0, t.find(':'));
  if (head == "INT") return Kind::signed_integer;
  if (head == "UINT") return Kind::unsigned_integer;
  if (head == "FLOAT") return Kind::real;
  return Kind::none;
}

// The text checked and rewritten in canonical decimal ("010" becomes "10"), or the reason it is refused.
std::string canonical(Kind kind, std::string& text) {
  switch (kind) {
    case Kind::signed_integer: {
      if (std::string problem = number_problem<long long>(text); !problem.empty()) return problem;
      text = std::to_string(parse_number<long long>(text, ""));
      return {};
    }
    case Kind::unsigned_integer: {
      if (std::string problem = number_problem<unsigned long long>(text); !problem.empty()) return problem;
      text = std::to_string(parse_number<unsigned long long>(text, ""));
      return {};
    }
    case Kind::real: {
      if (std::string problem = number_problem<double>(text); !problem.empty()) return problem;
      char buf[40];
      const auto r = std::to_chars(buf, buf + sizeof buf, parse_number<double>(text, ""));  // shortest round trip
      text.assign(buf, r.ptr);
      return {};
    }
    case Kind::none: break;
  }
  return {};
}

}  // namespace

void route_number_flags(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const Kind kind = kind_of(*opt);
    if (kind == Kind::none || opt->get_expected_max() == 0) continue;  // text, or a flag without a value
    // No description: the help keeps its type names (INT, FLOAT).
    opt->transform(CLI::Validator([kind](std::string& text) { return canonical(kind, text); }, "", "decimal number"));
    // Every thread count has one bound, whichever command asks (a huge one ran OpenMP out of stacks).
    if (opt->get_name() == "--threads") opt->check(CLI::Range(0, kMaxThreads));
  }
  for (CLI::App* sub : app.get_subcommands({})) route_number_flags(*sub);
}

}  // namespace mantissa::cli
