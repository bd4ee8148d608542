// Whole-file writes of the command; see output_file.h.
#include "output_file.h"

#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "training.h"

namespace mantissa::cli {

void check_output_path(const std::string& path, const char* flag) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    throw std::invalid_argument(std::string(flag) + " " + path + ": not a regular file (a directory, device or pipe)");
  }
  const std::string tmp = path + ".partial";
  if (!std::ofstream(tmp)) throw std::runtime_error(std::string(flag) + " " + path + ": cannot write the file here");
  std::filesystem::remove(tmp);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  if (process_group()->rank() != 0) return;  // under mpirun, rank 0 writes (the ranks' results are the same)
  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp);
    out << text;
    out.close();
    if (!out) {
      std::filesystem::remove(tmp);
      throw std::runtime_error(path + ": writing the file failed");
    }
  }
  std::filesystem::rename(tmp, path);
}

void progress(const char* format, ...) {
  if (process_group()->rank() != 0) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
}

}  // namespace mantissa::cli
