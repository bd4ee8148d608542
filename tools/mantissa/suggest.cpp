// Suggestions for unknown names; see suggest.h.
#include "suggest.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace mantissa::cli {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: rows of the (a.size() + 1) x (b.size() + 1) table, three kept.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  std::iota(prev.begin(), prev.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    before.swap(prev);
    prev.swap(cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  const std::string* best = nullptr;
  std::size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) best = &c, best_distance = d;
  }
  return best == nullptr ? "" : " (did you mean " + *best + "?)";
}

std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv) {
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
  // The subcommand named, if any.
  const CLI::App* sub = nullptr;
  int first = 1;
  while (first < argc && argv[first][0] == '-') ++first;
  if (first < argc) {
    for (const CLI::App* s : app.get_subcommands({})) {
      if (s->get_name() == argv[first]) sub = s;
    }
    if (sub == nullptr) {
      std::string list;
      for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
      return "'" + std::string(argv[first]) + "' is not a command" + did_you_mean(argv[first], commands) + "; the commands: " + list;
    }
  }
  std::string message = e.what();
  if (sub == nullptr || dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return message;
  // Flags the subcommand has not: each with the nearest it has.
  std::vector<std::string> flags;
  for (const CLI::Option* o : sub->get_options()) {
    for (const std::string& name : o->get_lnames()) flags.push_back("--" + name);
  }
  for (int i = first + 1; i < argc; ++i) {
    const std::string word = std::string(argv[i]).substr(0, std::string(argv[i]).find('='));
    if (word.rfind("--", 0) != 0 || std::find(flags.begin(), flags.end(), word) != flags.end()) continue;
    const std::string hint = did_you_mean(word, flags);
    message += "; " + word + " is no flag of " + sub->get_name() + (hint.empty() ? " (see " + sub->get_name() + " --help)" : hint);
  }
  return message;
}

}  // namespace mantissa::cli
