// The allocator's figures: a known sequence of allocations gives exactly the expected current and peak
// bytes per category, and the total peak is the peak of the sum (not the sum of the peaks).
#include <gtest/gtest.h>

#include <cstring>

#include "mantissa/autograd/node.h"
#include "mantissa/core/memory.h"
#include "mantissa/core/tensor.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

std::int64_t cur(MemoryCategory c) { return memory_stats().current_of(c); }
std::int64_t peak(MemoryCategory c) { return memory_stats().peak_of(c); }

TEST(Memory, KnownSequenceGivesExactCurrentAndPeak) {
  using C = MemoryCategory;
  const MemoryStats before = memory_stats();
  ASSERT_EQ(before.current_total, 0) << "a test before this one leaked tensors";
  reset_peak_memory();
  {
    MemoryCategoryScope params(C::parameters);
    Tensor w = Tensor::empty({256, 128}, DType::f32);  // 131072 bytes
    Tensor w16 = Tensor::empty({256, 128}, DType::bf16);  // 65536 bytes
    EXPECT_EQ(cur(C::parameters), 131072 + 65536);
    {
      MemoryCategoryScope grads(C::gradients);
      Tensor g = Tensor::empty({256, 128}, DType::f32);
      EXPECT_EQ(cur(C::gradients), 131072);
      {
        MemoryCategoryScope tmp(C::temporary);
        Tensor t1 = Tensor::empty({1000}, DType::f16);  // 2000 bytes
        Tensor t2 = Tensor::empty({10}, DType::e4m3);   // 10 bytes
        EXPECT_EQ(cur(C::temporary), 2010);
        t2.storage()->set_category(C::activations);  // kept for backward
        EXPECT_EQ(cur(C::temporary), 2000);
        EXPECT_EQ(cur(C::activations), 10);
      }
      EXPECT_EQ(cur(C::temporary), 0);
      EXPECT_EQ(cur(C::activations), 0);
      EXPECT_EQ(memory_stats().current_total, 131072 + 65536 + 131072);
    }
    EXPECT_EQ(cur(C::gradients), 0);
  }
  const MemoryStats s = memory_stats();
  EXPECT_EQ(s.current_total, 0);
  EXPECT_EQ(s.peak_of(C::parameters), 196608);
  EXPECT_EQ(s.peak_of(C::gradients), 131072);
  EXPECT_EQ(s.peak_of(C::temporary), 2010);
  EXPECT_EQ(s.peak_of(C::activations), 10);
  EXPECT_EQ(s.peak_total, 196608 + 131072 + 2010);  // moving t2 to activations did not add to the total
  reset_peak_memory();
  EXPECT_EQ(memory_stats().peak_total, 0);
  EXPECT_EQ(peak(C::parameters), 0);
}

TEST(Memory, ViewsAllocateNothingAndSavedTensorsCountAsActivations) {
  using C = MemoryCategory;
  reset_peak_memory();
  Tensor x = Tensor::zeros({64, 64}, DType::f32).set_requires_grad();
  const std::int64_t base = memory_stats().current_total;
  const Tensor t = transpose(x, 0, 1);
  const Tensor s = slice(x, 0, 0, 32);
  EXPECT_EQ(memory_stats().current_total, base);
  const Tensor y = mul(x, x);  // mul keeps both inputs for backward; x is its own leaf storage
  EXPECT_EQ(cur(C::activations), 64 * 64 * 4);  // x's storage, now counted as kept for backward
  EXPECT_EQ(cur(C::temporary), 64 * 64 * 4);    // y
}

}  // namespace
}  // namespace mantissa

namespace mantissa {
namespace {

TEST(Memory, FreedBlocksAreCachedForReuseWithoutCountingAsTensorMemory) {
  release_cached_memory();
  const std::int64_t bytes = 3 << 20;
  void* first = nullptr;
  {
    const Tensor a = Tensor::empty({bytes / 4}, DType::f32);
    first = a.storage()->data();
  }
  EXPECT_GE(memory_stats().cached, bytes);
  EXPECT_EQ(memory_stats().current_total, 0);
  const Tensor b = Tensor::empty({bytes / 4}, DType::f32);  // same size: the cached block
  EXPECT_EQ(b.storage()->data(), first);
  EXPECT_EQ(memory_stats().current_total, bytes);
  release_cached_memory();
  EXPECT_EQ(memory_stats().cached, 0);
}

}  // namespace
}  // namespace mantissa

namespace mantissa {
namespace {

// Tensor::to copies exactly the view's elements, in row-major order, bits included (a NaN's payload
// and -0 survive), from contiguous tensors and from strided views alike.
TEST(TensorTo, CopiesTheViewsElementsBitForBit) {
  const Tensor x = Tensor::randn({3, 5, 4}, DType::bf16, 3);
  reinterpret_cast<std::uint16_t*>(x.data())[7] = 0x7fa1;  // a NaN with a payload
  reinterpret_cast<std::uint16_t*>(x.data())[8] = 0x8000;  // -0
  for (const Tensor& v : {x, transpose(x, 0, 2), slice(x, 1, 1, 5, 2), expand(slice(x, 0, 0, 1), {4, 5, 4})}) {
    const Tensor y = v.to(Device::cpu());
    ASSERT_TRUE(y.is_contiguous());
    ASSERT_EQ(y.shape(), v.shape());
    ASSERT_NE(y.storage(), v.storage());
    const Tensor expected = contiguous_copy(v);
    EXPECT_EQ(0, std::memcmp(y.data(), expected.data(), static_cast<std::size_t>(y.numel()) * 2));
  }
}

}  // namespace
}  // namespace mantissa
