// Memory accounting: every tensor allocation goes through an allocator that tracks current and peak
// bytes per device and per category. This is how mantissa shows what mixed precision saves, so the
// figures are exact (bytes requested, not rounded), cheap (a few atomic adds) and queryable anywhere.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mantissa/core/device.h"

namespace mantissa {

enum class MemoryCategory : std::uint8_t {
  parameters,       // model weights (and master copies)
  gradients,        // .grad of parameters
  activations,      // tensors kept by autograd for the backward pass
  optimizer_state,  // moments, momentum buffers
  temporary,        // everything else: op outputs not kept, scratch
  data,             // data sets held in memory
};
inline constexpr std::size_t kMemoryCategories = 6;
std::string_view category_name(MemoryCategory c);

struct MemoryStats {
  std::array<std::int64_t, kMemoryCategories> current{};  // bytes live now, by category
  std::array<std::int64_t, kMemoryCategories> peak{};     // highest `current` of each category
  std::int64_t current_total = 0;
  std::int64_t peak_total = 0;  // highest sum over categories at any one time
  // Freed memory the allocator keeps for reuse (not counted above: no tensor holds it).
  std::int64_t cached = 0;

  std::int64_t current_of(MemoryCategory c) const { return current[static_cast<std::size_t>(c)]; }
  std::int64_t peak_of(MemoryCategory c) const { return peak[static_cast<std::size_t>(c)]; }
};

MemoryStats memory_stats(Device device = Device::cpu());
// Sets every peak to the current figure, so the next peaks cover only what follows.
void reset_peak_memory(Device device = Device::cpu());
// Returns the allocator's cached blocks to the system.
void release_cached_memory();

// New allocations on this thread are counted under `category` while the scope lives (default: temporary).
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory saved_;
};
MemoryCategory current_memory_category();

// Tests: fill every new allocation with 0xFF bytes (NaN in every float format), so that an output
// element a kernel forgot to write shows up. Off by default.
void set_allocation_poisoning(bool on);
bool allocation_poisoning();  // for device allocators, which poison their own memory

namespace detail {
// The accounting calls the allocators make (and Storage when it moves bytes between categories).
void account_allocate(Device device, MemoryCategory category, std::int64_t bytes);
void account_free(Device device, MemoryCategory category, std::int64_t bytes);
void account_move(Device device, MemoryCategory from, MemoryCategory to, std::int64_t bytes);
}  // namespace detail

}  // namespace mantissa
