// The device caching allocator's rules, on host memory standing in for a device with a capacity: reuse
// without new device allocations, splitting and merging, no two live blocks overlapping under random
// traffic, the cache given back before an out-of-memory error, and that error's message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "../../src/backend/caching_allocator.h"

namespace mantissa::detail {
namespace {

// Host memory with a capacity, counting what is live, as a device would.
class HostDevice final : public DeviceMemory {
 public:
  explicit HostDevice(std::size_t capacity) : capacity_(capacity) {}
  ~HostDevice() override { EXPECT_TRUE(live_.empty()) << "segments never given back"; }
  void* allocate(std::size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(4096, bytes);
    live_.emplace_back(static_cast<char*>(p), bytes);
    used_ += bytes;
    return p;
  }
  void free(void* p) override {
    auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& s) { return s.first == p; });
    ASSERT_NE(it, live_.end()) << "freeing an address that is not a segment";
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
  }
  bool inside_a_segment(const char* p, std::size_t n) const {
    return std::any_of(live_.begin(), live_.end(),
                       [&](const auto& s) { return p >= s.first && p + n <= s.first + s.second; });
  }
  std::size_t used() const { return used_; }

 private:
  std::size_t capacity_, used_ = 0;
  std::vector<std::pair<char*, std::size_t>> live_;
};

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(CachingAllocator, AFreedBlockIsHandedOutAgainWithoutAskingTheDevice) {
  HostDevice device(64 * kMiB);
  CachingAllocator a(device, "test:0");
  void* p = a.allocate(1000);
  a.free(p);
  EXPECT_EQ(a.allocate(1000), p);
  EXPECT_EQ(a.stats().device_allocations, 1u);
  EXPECT_EQ(a.stats().allocated, 1024u);  // rounded to 512-byte quanta
  a.free(p);
}

TEST(CachingAllocator, SmallRequestsShareASegmentAndMergeBackIntoIt) {
  HostDevice device(64 * kMiB);
  CachingAllocator a(device, "test:0");
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate(200 * 1024));
  EXPECT_EQ(a.stats().segments, 1u);  // 8 x 200 KiB fit in one 2 MiB segment
  EXPECT_EQ(a.stats().reserved, CachingAllocator::kSmallSegment);
  // Free in an order that needs merges on both sides.
  for (int i : {1, 3, 5, 7, 0, 2, 6, 4}) a.free(blocks[static_cast<std::size_t>(i)]);
  EXPECT_EQ(a.stats().allocated, 0u);
  // Merged whole again: the segment serves a request of its full size, and can be given back.
  void* whole = a.allocate(CachingAllocator::kSmallRequest);
  EXPECT_EQ(a.stats().device_allocations, 1u);
  a.free(whole);
  a.release_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(device.used(), 0u);
}

TEST(CachingAllocator, AStepRepeatedReachesASteadyStateWithNoDeviceAllocations) {
  HostDevice device(512 * kMiB);
  CachingAllocator a(device, "test:0");
  std::mt19937_64 rng(7);
  std::vector<std::size_t> step;  // the sizes of one "training step", allocated and freed in a pattern
  for (int i = 0; i < 200; ++i) step.push_back(std::uniform_int_distribution<std::size_t>(1, 6 * kMiB)(rng));
  std::size_t after_first = 0;
  for (int s = 0; s < 5; ++s) {
    std::vector<void*> live;
    for (std::size_t i = 0; i < step.size(); ++i) {
      live.push_back(a.allocate(step[i]));
      if (i % 3 == 2) {  // some outputs die young
        a.free(live[live.size() - 2]);
        live.erase(live.end() - 2);
      }
    }
    for (void* p : live) a.free(p);
    if (s == 0) after_first = a.stats().device_allocations;
  }
  EXPECT_EQ(a.stats().device_allocations, after_first) << "later steps should be served from the cache";
  a.release_cache();
}

TEST(CachingAllocator, LiveBlocksNeverOverlapUnderRandomTraffic) {
  HostDevice device(1024 * kMiB);
  CachingAllocator a(device, "test:0");
  std::mt19937_64 rng(11);
  struct Live {
    unsigned char* p;
    std::size_t n;
    unsigned char tag;
  };
  std::vector<Live> live;
  std::map<unsigned char*, std::size_t> ranges;  // the live blocks by address
  std::size_t expected_allocated = 0;
  for (int op = 0; op < 4000; ++op) {
    if (live.empty() || (live.size() < 150 && rng() % 2 == 0)) {
      // Mostly small, some large sizes, some exact quanta and some odd.
      const std::size_t n = rng() % 4 == 0 ? 1 + rng() % (8 * kMiB) : 1 + rng() % (64 * 1024);
      auto* p = static_cast<unsigned char*>(a.allocate(n));
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % CachingAllocator::kQuantum, 0u);
      ASSERT_TRUE(device.inside_a_segment(reinterpret_cast<char*>(p), n));
      // No live block may intersect the new one: check its neighbours in address order.
      auto next = ranges.lower_bound(p);
      if (next != ranges.end()) {
        ASSERT_GE(next->first, p + n) << "op " << op;
      }
      if (next != ranges.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, p) << "op " << op;
      }
      ranges[p] = n;
      const auto tag = static_cast<unsigned char>(op);
      std::memset(p, tag, std::min<std::size_t>(n, 4096));  // and the memory is really writable
      live.push_back({p, n, tag});
      expected_allocated += (n + 511) / 512 * 512;
    } else {
      const std::size_t k = rng() % live.size();
      const Live l = live[k];
      // Its bytes still hold its owner's tag.
      for (std::size_t i = 0; i < std::min<std::size_t>(l.n, 4096); i += 61) ASSERT_EQ(l.p[i], l.tag) << "op " << op;
      ranges.erase(l.p);
      a.free(l.p);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      expected_allocated -= (l.n + 511) / 512 * 512;
    }
    // A large block keeps a remainder of up to 1 MiB rather than cut it off (kSmallRequest).
    const std::size_t large_live = static_cast<std::size_t>(std::count_if(
        live.begin(), live.end(), [](const Live& l) { return l.n > CachingAllocator::kSmallRequest; }));
    ASSERT_GE(a.stats().allocated, expected_allocated);
    ASSERT_LE(a.stats().allocated, expected_allocated + large_live * CachingAllocator::kSmallRequest);
    ASSERT_LE(a.stats().allocated, a.stats().reserved);
    ASSERT_EQ(a.stats().reserved, device.used());
  }
  for (const Live& l : live) a.free(l.p);
  EXPECT_EQ(a.stats().allocated, 0u);
  a.release_cache();
  EXPECT_EQ(device.used(), 0u);
}

TEST(CachingAllocator, GivesTheCacheBackBeforeRunningOutAndThenSaysHowMuchWasHeld) {
  HostDevice device(16 * kMiB);
  CachingAllocator a(device, "cuda:0");
  void* big = a.allocate(10 * kMiB);
  a.free(big);  // cached: 10 MiB reserved, nothing in use
  void* other = a.allocate(12 * kMiB);  // does not fit beside the cached segment: it must be given back
  EXPECT_EQ(a.stats().segments, 1u);
  EXPECT_EQ(a.stats().device_frees, 1u);
  try {
    a.allocate(8 * kMiB);
    FAIL() << "expected DeviceOutOfMemory";
  } catch (const DeviceOutOfMemory& e) {
    EXPECT_STREQ(e.what(),
                 "cuda:0: out of memory: asked for 8.0 MiB with 12.0 MiB in use by tensors and 12.0 MiB reserved in "
                 "all (the cache was given back first)");
  }
  a.free(other);
}

TEST(CachingAllocator, RefusesToFreeAPointerItDidNotHandOut) {
  HostDevice device(8 * kMiB);
  CachingAllocator a(device, "test:0");
  int x = 0;
  EXPECT_THROW(a.free(&x), std::invalid_argument);
  void* p = a.allocate(100);
  a.free(p);
  EXPECT_THROW(a.free(p), std::invalid_argument);  // twice
}

}  // namespace
}  // namespace mantissa::detail
