// Reference-counted memory behind tensors. A Storage is one allocation on one device, counted under a
// memory category that can change (an op output kept for backward becomes an activation). Bytes move
// between devices only through their allocators (copy_bytes), so the core never touches device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mantissa/core/device.h"
#include "mantissa/core/memory.h"

namespace mantissa {

// Hands out raw memory for one device type, and moves bytes in and out of it. The CPU's is built in
// (the moves are memcpy and memset); a CUDA backend registers its own. Device-side moves are ordered
// with the device's kernels; the ones that land in host memory return once the bytes are there.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // `device` is one of this allocator's type (its index says which).
  virtual void* allocate(std::size_t bytes, Device device) = 0;
  virtual void deallocate(void* p, std::size_t bytes, Device device) = 0;
  virtual void copy_to_host(void* host, const void* src, std::size_t bytes);
  virtual void copy_from_host(void* dst, const void* host, std::size_t bytes);
  virtual void copy_within(void* dst, const void* src, std::size_t bytes);  // both on this device
  virtual void fill_zero(void* p, std::size_t bytes);
  // Fills `bytes` (a multiple of size) with copies of the `size` bytes at `pattern` (1, 2, 4 or 8: one
  // element's encoding), queued on the device like a kernel: a tensor full of one value is made where it
  // lives, never through host memory.
  virtual void fill_pattern(void* p, std::size_t bytes, const void* pattern, std::size_t size);
  // Freed memory kept for reuse, and giving it back to the system.
  virtual std::size_t cached_bytes() { return 0; }
  virtual void release_cache() {}
};
// Installs the allocator of a device type; returns the one it replaces (nullptr if none).
Allocator* register_allocator(DeviceType type, Allocator* allocator);

// What the host exchanged with devices since the process started: the copies between host and device
// memory (every one passes through copy_bytes, which counts it) and the times the host waited for a
// device (a backend reports each with note_device_wait: a copy to the host, a stream synchronization).
// Each wait drains the device's queue; a training step on a GPU should need one (its loss), and
// `bench --json` reports these per step. wait_seconds: how long the waits took that reported it
// (note_waited): near zero when the device had nothing queued.
struct HostDeviceTraffic {
  std::uint64_t to_host = 0, from_host = 0, waits = 0;
  double wait_seconds = 0;
};
HostDeviceTraffic host_device_traffic();
void note_device_wait();
void note_waited(double seconds);

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

// Copies `bytes` from src (at byte offset src_offset) to dst (at dst_offset), on any pair of devices.
void copy_bytes(const Storage& dst, std::size_t dst_offset, const Storage& src, std::size_t src_offset,
                std::size_t bytes);
// Sets `bytes` of s from byte offset `offset` to zero.
void fill_zero_bytes(const Storage& s, std::size_t offset, std::size_t bytes);
// Fills `bytes` of s from byte offset `offset` with copies of a `size`-byte pattern, on s's device.
void fill_pattern_bytes(const Storage& s, std::size_t offset, std::size_t bytes, const void* pattern, std::size_t size);

}  // namespace mantissa
