// The GPU pooling backward's window arithmetic (src/backend/cuda/pool_windows.h), checked on every
// machine against a brute-force walk over every window: every kernel, stride and padding up to 4, every
// input size up to 12.
#include <gtest/gtest.h>

#include "../../src/backend/cuda/pool_windows.h"

namespace mantissa::detail::cuda {
namespace {

TEST(PoolWindows, TheCoveringWindowsAreExactlyThoseThatContainTheInput) {
  int checked = 0;
  for (std::int64_t kernel = 1; kernel <= 4; ++kernel) {
    for (std::int64_t stride = 1; stride <= 4; ++stride) {
      for (std::int64_t pad = 0; pad * 2 <= kernel; ++pad) {
        for (std::int64_t size = 1; size <= 12; ++size) {
          const std::int64_t span = size + 2 * pad - kernel;
          if (span < 0) continue;
          const std::int64_t outputs = span / stride + 1;
          for (std::int64_t i = 0; i < size; ++i) {
            std::int64_t first = 0, last = 0;
            covering_windows(i, kernel, stride, pad, outputs, first, last);
            for (std::int64_t o = 0; o < outputs; ++o) {
              const bool covers = o * stride - pad <= i && i < o * stride - pad + kernel;
              const bool listed = first <= o && o <= last;
              ASSERT_EQ(listed, covers) << "kernel " << kernel << " stride " << stride << " pad " << pad << " size "
                                        << size << " input " << i << " window " << o;
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace mantissa::detail::cuda
