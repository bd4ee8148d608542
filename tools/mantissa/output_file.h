// What the command writes: whole files (pictures, reports, plans) through the library's one writer,
// and progress lines; under mpirun both come from rank 0 alone (every rank trains the same run).
// Output paths are checked before a command runs (output_flags.h).
#pragma once

#include <string>
#include <string_view>

namespace mantissa::cli {

// Writes text to path atomically (mantissa/core/output_file.h), on rank 0 only; `what` names it in
// errors (its flag).
void write_output(const std::string& path, std::string_view text, std::string_view what);
// A progress line (printf's format) on standard error; under mpirun on rank 0 only. (Errors come from
// any rank, naming it: main.cpp.)
[[gnu::format(printf, 1, 2)]] void progress(const char* format, ...);
// --quiet: progress() prints nothing from here on (warnings and errors are not progress lines).
void set_quiet(bool quiet);
bool quiet();
// A time left for people: "45s", "4m10s", "2h05m".
std::string duration_str(double seconds);

}  // namespace mantissa::cli
