// A caching allocator for device memory, in the manner of PyTorch's CUDA allocator. Asking the device
// for memory (cudaMalloc) is slow and waits for the whole device, and a training step allocates the same
// sizes every step; so memory is taken from the device in segments, cut into blocks, and a block a
// tensor frees goes back to a pool for the next allocation of a similar size, never to the device.
//
// Stream order: all of a device's work runs on one stream, so a freed block can be handed out again at
// once (whatever kernel used it was queued before any kernel of its next user). A second stream that
// touches a block (a communication stream) must record the block's use before this holds; none does yet.
//
// Device-neutral on purpose: the CUDA backend gives it cudaMalloc/cudaFree as a DeviceMemory, and the
// unit tests give it host memory with a capacity, so every rule here is tested on any machine.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace mantissa::detail {

// Raw memory of one device: allocate returns nullptr when the device has no room.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* p) = 0;
};

// Thrown when the device has no room even after the cache was given back; the message says how much
// was asked for and how much is held, in MiB.
class DeviceOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CachingAllocatorStats {
  std::size_t allocated = 0;  // bytes in blocks handed out (rounded sizes)
  std::size_t reserved = 0;   // bytes in segments taken from the device
  std::size_t segments = 0;
  std::size_t device_allocations = 0;  // calls to DeviceMemory::allocate that succeeded, ever
  std::size_t device_frees = 0;
};

class CachingAllocator {
 public:
  // Sizes are rounded up to kQuantum; requests up to kSmallRequest come from kSmallSegment segments
  // shared by many blocks, larger ones from segments of their size rounded up to kLargeQuantum.
  static constexpr std::size_t kQuantum = 512;
  static constexpr std::size_t kSmallRequest = std::size_t{1} << 20;
  static constexpr std::size_t kSmallSegment = std::size_t{2} << 20;
  static constexpr std::size_t kLargeQuantum = std::size_t{2} << 20;

  // `name` names the device in messages ("cuda:0").
  CachingAllocator(DeviceMemory& memory, std::string name);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (kQuantum-aligned within its segment); throws DeviceOutOfMemory.
  void* allocate(std::size_t bytes);
  // Returns a block from allocate to the pool; throws std::invalid_argument for any other pointer.
  void free(void* p);
  // Gives every segment with no block in use back to the device.
  void release_cache();
  CachingAllocatorStats stats() const;

 private:
  struct Block {
    char* ptr;
    std::size_t size;
    bool small;  // from the small pool's segments
    bool in_use = false;
    Block* prev = nullptr;  // neighbours in the same segment
    Block* next = nullptr;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, BySize>;

  Block* take_free_block(Pool& pool, std::size_t size);
  Block* new_segment(std::size_t segment_bytes, bool small);
  void release_free_segments();
  std::string out_of_memory_message(std::size_t bytes) const;

  DeviceMemory& memory_;
  std::string name_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> in_use_;
  CachingAllocatorStats stats_;
};

}  // namespace mantissa::detail
