// Whole-file writes and progress lines of the command; see output_file.h.
#include "output_file.h"

#include <cstdarg>
#include <cstdio>

#include "mantissa/core/output_file.h"
#include "training.h"

namespace mantissa::cli {

void write_output(const std::string& path, std::string_view text, std::string_view what) {
  if (process_group()->rank() != 0) return;  // under mpirun, rank 0 writes (the ranks' results are the same)
  write_file_atomically(path, text, what);
}

namespace {
bool g_quiet = false;
}  // namespace

void set_quiet(bool quiet) { g_quiet = quiet; }
bool quiet() { return g_quiet; }

void progress(const char* format, ...) {
  if (g_quiet || process_group()->rank() != 0) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
}

std::string duration_str(double seconds) {
  if (!(seconds >= 0) || seconds > 1e9) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char out[32];
  if (s < 60) std::snprintf(out, sizeof out, "%llds", s);
  else if (s < 3600) std::snprintf(out, sizeof out, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(out, sizeof out, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  return out;
}

}  // namespace mantissa::cli
