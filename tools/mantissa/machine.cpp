// The machine, the time and the version; see machine.h.
#include "machine.h"

#include <chrono>
#include <ctime>
#include <sstream>

#include "mantissa/core/input_file.h"

namespace mantissa::cli {

std::string cpu_name() {
  std::istringstream cpuinfo;
  try {
    cpuinfo.str(InputFile("/proc/cpuinfo", "the CPU's description", std::uint64_t{1} << 20).read_text());
  } catch (const InputFileError&) {  // no /proc: the name is unknown
  }
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  }
  return "an unknown CPU";
}

std::string utc_now(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char out[64];
  return std::strftime(out, sizeof out, format, &utc) > 0 ? out : "";
}

double unix_time() {
  const auto since = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(since).count()) / 1e6;
}

const char* version() { return MANTISSA_VERSION; }

}  // namespace mantissa::cli
