// "Did you mean": the nearest of a command's names to a word it did not know (a misspelled subcommand or
// flag), by edit distance, for the one-line error that refuses it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace mantissa::cli {

// Insertions, deletions, substitutions and swaps of neighbours that turn a into b.
std::size_t edit_distance(std::string_view a, std::string_view b);
// " (did you mean --steps?)" for the candidate nearest `word`, where it is within a third of the word's
// length (and at least 2 edits); "" where none is that near.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);
// The error for a command line the parser refused, with suggestions for the words it did not know: an
// unknown subcommand (argv's first word), or flags no option of the subcommand has.
std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv);

}  // namespace mantissa::cli
