// The CUDA backend's alternative ways (src/backend/cuda/kernel_ways.h), one table: every switch is read
// through it, and the device check (scripts/gpu-check.sh, which turns them to route around a crash) and
// docs/cuda.md name every one. Runs without a GPU: the table and the scan are plain C++.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "../../src/backend/cuda/kernel_ways.h"
#include "source_scan.h"

namespace mantissa::detail::cuda {
namespace {

std::string text_of(const char* relative) {
  std::ifstream in(std::string(MANTISSA_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(KernelWays, EachSwitchTurnsItsWayOffWithItsValueOnly) {
  for (const WaySwitch& s : kWaySwitches) {
    const std::string variable(s.variable);
    ::unsetenv(variable.c_str());
    EXPECT_TRUE(way_on(s.way)) << variable;
    ::setenv(variable.c_str(), std::string(s.other).c_str(), 1);
    EXPECT_FALSE(way_on(s.way)) << variable;
    ::setenv(variable.c_str(), "something else", 1);
    EXPECT_TRUE(way_on(s.way)) << variable;
    ::unsetenv(variable.c_str());
  }
}

// A CUDA source that reads a switch with getenv of its own bypasses the table (and the check's list).
TEST(KernelWays, NoCudaSourceReadsTheEnvironmentButThroughTheTable) {
  const testing::SourceScan scan = testing::scan_sources({"getenv"}, true, {"src/backend/cuda/kernel_ways.h"});
  EXPECT_GT(scan.files, 100);
  for (const std::string& m : scan.matches) {
    if (!m.starts_with("src/backend/cuda/")) continue;
    EXPECT_NE(m.find("MANTISSA_SDPA_PLUGIN"), std::string::npos) << m << ": a switch belongs in kernel_ways.h";  // (a path)
  }
}

TEST(KernelWays, TheDeviceCheckAndTheDocsNameEverySwitch) {
  const std::string check = text_of("scripts/gpu-check.sh"), docs = text_of("docs/cuda.md");
  ASSERT_FALSE(check.empty());
  for (const WaySwitch& s : kWaySwitches) {
    const std::string setting = std::string(s.variable) + "=" + std::string(s.other);
    EXPECT_NE(check.find(setting), std::string::npos) << "scripts/gpu-check.sh does not name " << setting;
    EXPECT_NE(docs.find(setting), std::string::npos) << "docs/cuda.md does not name " << setting;
  }
}

}  // namespace
}  // namespace mantissa::detail::cuda
