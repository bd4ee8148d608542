// What every fuzz target shares: the libFuzzer entry point, a scratch file to hand the readers (they take
// paths, as users give them), and `require`, which turns a broken invariant into a crash the fuzzer
// reports. A reader that rejects its input with its own error type is the expected outcome, not a
// finding; anything else that escapes (another exception, std::bad_alloc, a sanitizer report) is one.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace mantissa::fuzz {

// Stops the run with a message: libFuzzer saves the input that broke the invariant.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
  }
}

// A directory of this process's own under the system's temporary directory, removed at exit; or the one
// MANTISSA_FUZZ_SCRATCH names. The fuzz check (scripts/fuzz.sh BUILD check) names one that is the same on
// every run: the readers' error messages hold the path, libFuzzer learns the bytes they compare with,
// and a path that held the process id made two runs from one seed mutate differently.
inline std::filesystem::path scratch_path() {
  if (const char* fixed = std::getenv("MANTISSA_FUZZ_SCRATCH"); fixed != nullptr && *fixed != '\0') return fixed;
  return std::filesystem::temp_directory_path() / ("mantissa-fuzz-" + std::to_string(::getpid()));
}
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::create_directories(scratch_path());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_path(), ec);  // (not dir: it is destroyed before this runs)
    });
    return scratch_path();
  }();
  return dir;
}

// Writes `size` bytes to `name` in the scratch directory and returns its path.
inline std::filesystem::path write_scratch(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  require(static_cast<bool>(out), "writing the scratch file");
  return path;
}

}  // namespace mantissa::fuzz
