// The fixture every GPU case derives from: the case is skipped, with the reason cuda_info() gives, where
// no GPU is usable (a CPU machine, a build without CUDA), so the GPU suites run, and say why they did
// nothing, everywhere.
#pragma once

#include <gtest/gtest.h>

#include "mantissa/backend/cuda.h"

namespace mantissa::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << cuda_info().unavailable;
  }
};

}  // namespace mantissa::testing
