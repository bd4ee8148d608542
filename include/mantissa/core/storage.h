// Reference-counted memory behind tensors. A Storage is one allocation on one device, counted under a
// memory category that can change (an op output kept for backward becomes an activation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mantissa/core/device.h"
#include "mantissa/core/memory.h"

namespace mantissa {

// Hands out raw memory for one device type. The CPU's is built in; a CUDA backend registers its own.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) = 0;
};
void register_allocator(DeviceType type, Allocator* allocator);

class StorageImpl {
 public:
  StorageImpl(std::size_t bytes, Device device, MemoryCategory category);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }
  // Moves the bytes to another category in the accounting.
  void set_category(MemoryCategory category);
  // Counts writes that change the contents in place after the fact (an optimizer step, a checkpoint
  // load), so that a copy derived from the old contents (autocast's cached casts) can tell it is stale.
  std::uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  std::uint64_t version_ = 0;
  void* data_;
  std::size_t bytes_;
  Device device_;
  MemoryCategory category_;
};

using Storage = std::shared_ptr<StorageImpl>;

// Allocates under the thread's current memory category unless one is given.
Storage allocate_storage(std::size_t bytes, Device device = Device::cpu());
Storage allocate_storage(std::size_t bytes, Device device, MemoryCategory category);

}  // namespace mantissa
