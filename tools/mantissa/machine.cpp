// The machine, the time and the version; see machine.h.
#include "machine.h"

#include <pthread.h>
#include <unistd.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <sstream>

#include <fmt/format.h>

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

ThreadCap thread_cap() {
  constexpr int kMaxThreads = 4096;
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return {kMaxThreads, ""};
  // What the process has mapped already (the first field of /proc/self/statm, in pages).
  std::uint64_t mapped_pages = 0;
  try {
    std::istringstream(InputFile("/proc/self/statm", "the process's memory", 4096).read_text()) >> mapped_pages;
  } catch (const InputFileError&) {  // no /proc: count nothing mapped
  }
  const std::uint64_t mapped = mapped_pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::size_t stack = std::size_t{8} << 20;
  pthread_attr_t attr;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
  }
  const std::uint64_t per_thread = stack + (std::uint64_t{1} << 20);  // the stack, its guard page, a thread's arena share
  const std::uint64_t free_space = as.rlim_cur > mapped ? as.rlim_cur - mapped : 0;
  const auto fit = static_cast<int>(std::min<std::uint64_t>(free_space / 2 / per_thread, kMaxThreads));
  if (fit >= kMaxThreads) return {kMaxThreads, ""};
  return {std::max(fit, 1), fmt::format("the address space limit ({:.3g} GiB) leaves room for {} more stacks of {} MiB",
                                        static_cast<double>(as.rlim_cur) / (1 << 30), fit, stack >> 20)};
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
