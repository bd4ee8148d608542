// route_number_flags (number_flags.h): CLI11 transforms on every option that takes a value.
#include "number_flags.h"

#include <omp.h>

#include <charconv>
#include <string>

#include "machine.h"
#include "mantissa/base/errors.h"
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

std::string thread_count_problem(long long threads) {
  if (threads < 0) return "must be 0 (all of this machine's cores) or more, got " + std::to_string(threads);
  const ThreadCap cap = thread_cap();
  if (threads <= cap.threads) return {};
  return std::to_string(threads) + " threads are more than this process can start: at most " + std::to_string(cap.threads) +
         (cap.why.empty() ? "" : " (" + cap.why + ")");
}

int use_threads(int requested) {
  const int threads = requested > 0 ? requested : omp_get_max_threads();
  if (std::string problem = thread_count_problem(threads); !problem.empty()) {
    throw UsageError(requested > 0 ? "--threads: " + problem : "the count OpenMP takes when --threads is not given (OMP_NUM_THREADS, else the cores): " + problem);
  }
  omp_set_num_threads(threads);
  return threads;
}

void route_number_flags(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 0) continue;  // a flag without a value
    // transform() puts a validator in front of the option's others: the empty check, added last, runs
    // first, then the number's, then the option's own checks.
    if (const Kind kind = kind_of(*opt); kind != Kind::none) {
      // No description: the help keeps its type names (INT, FLOAT).
      opt->transform(CLI::Validator([kind](std::string& text) { return canonical(kind, text); }, "", "decimal number"));
    }
    opt->transform(CLI::Validator(
        [](std::string& text) { return text.empty() ? std::string("an empty value (give one, or leave the option out)") : ""; },
        "", "non-empty"));
    // Every thread count has one bound, whichever command asks (a huge one ran OpenMP out of stacks).
    if (opt->get_name() == "--threads") {
      const auto problem = [](std::string& text) { return thread_count_problem(parse_number<long long>(text, "--threads")); };
      opt->check(CLI::Validator(problem, "", "thread count"));
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) route_number_flags(*sub);
}

}  // namespace mantissa::cli
