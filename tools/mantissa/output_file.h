// Files the command writes whole (pictures, plans): checked before a long run starts, written under a
// temporary name and renamed over the target, so a reader never sees half a file and a failed write
// leaves the old one. And progress lines, which under mpirun come from rank 0 alone, as files do.
#pragma once

#include <string>

namespace mantissa::cli {

// Throws std::invalid_argument if path exists and is not a regular file, or std::runtime_error if its
// directory does not take a new file. `flag` names the option in the message.
void check_output_path(const std::string& path, const char* flag);
// Writes text to path atomically (under mpirun, on rank 0 only); throws std::runtime_error naming the path.
void write_file_atomically(const std::string& path, const std::string& text);
// A progress line (printf's format) on standard error; under mpirun on rank 0 only: every rank trains the
// same run. (Errors come from any rank, naming it: main.cpp.)
[[gnu::format(printf, 1, 2)]] void progress(const char* format, ...);

}  // namespace mantissa::cli
