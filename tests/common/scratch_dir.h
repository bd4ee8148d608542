// A fresh, empty directory for one test's files: under the system's temporary directory, named by the
// process (ctest runs cases in parallel processes) and `name`, removed first if an earlier run left it.
// The test removes it when done.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace mantissa::testing {

inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("mantissa_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace mantissa::testing
