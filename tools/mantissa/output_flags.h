// Every path a command writes is a flag declared by one of these functions, which gives it a type name
// that says its kind (OUT_FILE, APPEND_FILE, OUT_DIR, OUT_PREFIX). check_output_flags() runs the
// library's writer checks (mantissa/core/output_file.h) on each such flag of the command that was
// parsed, given or defaulted, before the command does any work: a read-only directory, a file where a
// directory should be, a symbolic link or a device at the path, an empty path: one error at step 0, not
// after the run. (tests/cli's OutputFlags cases find every such flag in each command's help and plant
// links and special files at each.)
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace mantissa::cli {

// A file written whole (replaced atomically).
CLI::Option* add_output_file(CLI::App& app, const std::string& name, std::string& path, const std::string& about);
// A file appended to as the run goes. The first such flag of a command also adds --follow-symlinks,
// bound to `follow` (pass the same bool for each).
CLI::Option* add_append_file(CLI::App& app, const std::string& name, std::string& path, bool& follow, const std::string& about);
// A directory the command writes files into (made if absent).
CLI::Option* add_output_dir(CLI::App& app, const std::string& name, std::string& path, const std::string& about);
// A prefix of files written whole (PREFIX-<name>.svg): its directory is checked.
CLI::Option* add_output_prefix(CLI::App& app, const std::string& name, std::string& path, const std::string& about);

// Checks each output flag of `command` and of its parsed subcommands (but one excluded by a flag that
// was given, as --no-plot excludes --plot); throws mantissa::OutputPathError.
void check_output_flags(const CLI::App& command);

}  // namespace mantissa::cli
