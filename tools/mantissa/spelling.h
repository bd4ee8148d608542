// One spelling per concept across the commands: a switch is on or off wherever it appears, a list of
// precisions is --precisions, a dtype is fp32, bf16 or fp16. A spelling a command once took is still read,
// with one note naming the current one, so that scripts keep working while people learn the one spelling.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace mantissa::cli {

// "on" or "off" as a bool; the old spellings 1/0 (bench's) read too, with a note. Throws
// std::invalid_argument naming the flag for anything else.
bool parse_on_off(const std::string& flag, const std::string& value);

// An option whose value is on or off (read by parse_on_off as the command line is parsed), into `value`.
void add_on_off_option(CLI::App& app, const std::string& flag, bool& value, const std::string& description);

// Registers `old_name` as an old spelling of the option `current`, writing the same `value`, hidden from
// --help; a command line that uses it gets a note saying the current spelling.
void add_old_spelling(CLI::App& app, const std::string& old_name, const std::string& current, std::string& value);

}  // namespace mantissa::cli
