// Memory accounting by device and category, the allocator registry, and Storage.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "mantissa/core/storage.h"

namespace mantissa {
namespace {

constexpr std::size_t kAlignment = 64;  // a cache line, and an AVX-512 register
constexpr int kMaxDevices = 16;

struct DeviceAccounts {
  std::mutex mutex;
  MemoryStats stats;
};

DeviceAccounts& accounts(Device d) {
  static DeviceAccounts cpu;
  static DeviceAccounts cuda[kMaxDevices];
  if (d.type == DeviceType::cpu) return cpu;
  if (d.index < 0 || d.index >= kMaxDevices) throw std::out_of_range("device index out of range: " + d.str());
  return cuda[d.index];
}

thread_local MemoryCategory tls_category = MemoryCategory::temporary;
std::atomic<bool> poison_allocations{false};

// Keeps freed blocks for reuse by an allocation of the same (rounded) size: a training step allocates
// the same sizes every step, and handing memory back to the system makes the next step fault every
// page in again (about 2,400 faults a step for a 4-layer MLP, a third of its time). Cached bytes are
// bounded; past the bound, blocks are really freed.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes, Device) override {
    const std::size_t rounded = round(bytes);
    void* p = nullptr;
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= rounded;
      }
    }
    if (p == nullptr) {
      p = fresh(rounded);
      if (p == nullptr) {
        release_cache();  // memory is short: give the cache back and try once more
        p = fresh(rounded);
        if (p == nullptr) throw std::bad_alloc();
      }
    }
    if (poison_allocations.load(std::memory_order_relaxed)) std::memset(p, 0xff, rounded);
    return p;
  }

  void deallocate(void* p, std::size_t bytes, Device) override {
    const std::size_t rounded = round(bytes);
    {
      std::lock_guard lock(mutex_);
      if (cached_ + rounded <= kMaxCachedBytes) {
        free_[rounded].push_back(p);
        cached_ += rounded;
        return;
      }
    }
    std::free(p);
  }

  std::size_t cached_bytes() override {
    std::lock_guard lock(mutex_);
    return cached_;
  }

  void release_cache() override {
    std::lock_guard lock(mutex_);
    for (auto& [size, blocks] : free_) {
      for (void* b : blocks) std::free(b);
    }
    free_.clear();
    cached_ = 0;
  }

 private:
  static constexpr std::size_t kMaxCachedBytes = std::size_t{4} << 30;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  // Blocks of 2 MiB or more start on a 2 MiB boundary and ask Linux for transparent huge pages (which
  // this machine grants only on request): a large matmul's operands then need 512 times fewer TLB
  // entries; f32 and bf16 products of 8192x768x3072 ran 10-20% faster so.
  static void* fresh(std::size_t bytes) {
    if (bytes < kHugePage) return std::aligned_alloc(kAlignment, bytes);
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, bytes) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only: a refusal changes nothing
#endif
    return p;
  }
  static std::size_t round(std::size_t bytes) {
    return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }

  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: tensors may outlive static destruction
  return *a;
}

Allocator*& allocator_slot(DeviceType type) {
  static Allocator* slots[2] = {&cpu_allocator(), nullptr};
  return slots[static_cast<int>(type)];
}

Allocator& allocator_for(Device d) {
  Allocator* a = allocator_slot(d.type);
  if (a == nullptr) throw std::runtime_error("no allocator for device " + d.str() + " in this build");
  return *a;
}

}  // namespace

std::string_view category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::temporary: return "temporary";
    case MemoryCategory::data: return "data";
  }
  return "?";
}

MemoryStats memory_stats(Device device) {
  DeviceAccounts& a = accounts(device);
  MemoryStats s;
  {
    std::lock_guard lock(a.mutex);
    s = a.stats;
  }
  if (Allocator* allocator = allocator_slot(device.type)) s.cached = static_cast<std::int64_t>(allocator->cached_bytes());
  return s;
}

void release_cached_memory() {
  for (DeviceType type : {DeviceType::cpu, DeviceType::cuda}) {
    if (Allocator* allocator = allocator_slot(type)) allocator->release_cache();
  }
}

void reset_peak_memory(Device device) {
  DeviceAccounts& a = accounts(device);
  std::lock_guard lock(a.mutex);
  a.stats.peak = a.stats.current;
  a.stats.peak_total = a.stats.current_total;
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : saved_(tls_category) {
  tls_category = category;
}
MemoryCategoryScope::~MemoryCategoryScope() { tls_category = saved_; }
MemoryCategory current_memory_category() { return tls_category; }
void set_allocation_poisoning(bool on) { poison_allocations.store(on, std::memory_order_relaxed); }
bool allocation_poisoning() { return poison_allocations.load(std::memory_order_relaxed); }

namespace detail {

void account_allocate(Device device, MemoryCategory category, std::int64_t bytes) {
  DeviceAccounts& a = accounts(device);
  std::lock_guard lock(a.mutex);
  const auto c = static_cast<std::size_t>(category);
  a.stats.current[c] += bytes;
  a.stats.current_total += bytes;
  if (a.stats.current[c] > a.stats.peak[c]) a.stats.peak[c] = a.stats.current[c];
  if (a.stats.current_total > a.stats.peak_total) a.stats.peak_total = a.stats.current_total;
}

void account_free(Device device, MemoryCategory category, std::int64_t bytes) {
  DeviceAccounts& a = accounts(device);
  std::lock_guard lock(a.mutex);
  a.stats.current[static_cast<std::size_t>(category)] -= bytes;
  a.stats.current_total -= bytes;
}

void account_move(Device device, MemoryCategory from, MemoryCategory to, std::int64_t bytes) {
  DeviceAccounts& a = accounts(device);
  std::lock_guard lock(a.mutex);
  const auto t = static_cast<std::size_t>(to);
  a.stats.current[static_cast<std::size_t>(from)] -= bytes;
  a.stats.current[t] += bytes;
  if (a.stats.current[t] > a.stats.peak[t]) a.stats.peak[t] = a.stats.current[t];
}

}  // namespace detail

Allocator* register_allocator(DeviceType type, Allocator* allocator) { return std::exchange(allocator_slot(type), allocator); }

namespace {
std::atomic<std::uint64_t> copies_to_host{0}, copies_from_host{0}, device_waits{0}, waited_ns{0};
}  // namespace

HostDeviceTraffic host_device_traffic() {
  return {copies_to_host.load(std::memory_order_relaxed), copies_from_host.load(std::memory_order_relaxed),
          device_waits.load(std::memory_order_relaxed), static_cast<double>(waited_ns.load(std::memory_order_relaxed)) / 1e9};
}
void note_device_wait() { device_waits.fetch_add(1, std::memory_order_relaxed); }
void note_waited(double seconds) { waited_ns.fetch_add(static_cast<std::uint64_t>(seconds * 1e9), std::memory_order_relaxed); }

void Allocator::copy_to_host(void* host, const void* src, std::size_t bytes) { std::memcpy(host, src, bytes); }
void Allocator::copy_from_host(void* dst, const void* host, std::size_t bytes) { std::memcpy(dst, host, bytes); }
void Allocator::copy_within(void* dst, const void* src, std::size_t bytes) { std::memmove(dst, src, bytes); }
void Allocator::fill_zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
void Allocator::fill_pattern(void* p, std::size_t bytes, const void* pattern, std::size_t size) {
  if (bytes == 0) return;
  // The pattern once, then the filled part doubled along the buffer.
  auto* out = static_cast<unsigned char*>(p);
  std::memcpy(out, pattern, size);
  for (std::size_t done = size; done < bytes; done += std::min(done, bytes - done)) {
    std::memcpy(out + done, out, std::min(done, bytes - done));
  }
}

void copy_bytes(const Storage& dst, std::size_t dst_offset, const Storage& src, std::size_t src_offset,
                std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_offset + bytes > dst->bytes() || src_offset + bytes > src->bytes()) {
    throw std::out_of_range("copy of " + std::to_string(bytes) + " bytes past the end of a storage");
  }
  void* to = static_cast<char*>(dst->data()) + dst_offset;
  const void* from = static_cast<const char*>(src->data()) + src_offset;
  const Device d = dst->device();
  const Device s = src->device();
  if (d == s) {
    allocator_for(d).copy_within(to, from, bytes);
  } else if (d.type == DeviceType::cpu) {
    copies_to_host.fetch_add(1, std::memory_order_relaxed);
    allocator_for(s).copy_to_host(to, from, bytes);
  } else if (s.type == DeviceType::cpu) {
    copies_from_host.fetch_add(1, std::memory_order_relaxed);
    allocator_for(d).copy_from_host(to, from, bytes);
  } else {  // between two devices: through the host (no peer copies yet)
    copies_to_host.fetch_add(1, std::memory_order_relaxed);
    copies_from_host.fetch_add(1, std::memory_order_relaxed);
    std::vector<unsigned char> staging(bytes);
    allocator_for(s).copy_to_host(staging.data(), from, bytes);
    allocator_for(d).copy_from_host(to, staging.data(), bytes);
  }
}

void fill_zero_bytes(const Storage& s, std::size_t offset, std::size_t bytes) {
  if (offset + bytes > s->bytes()) throw std::out_of_range("zero fill past the end of a storage");
  allocator_for(s->device()).fill_zero(static_cast<char*>(s->data()) + offset, bytes);
}

void fill_pattern_bytes(const Storage& s, std::size_t offset, std::size_t bytes, const void* pattern, std::size_t size) {
  if (offset + bytes > s->bytes()) throw std::out_of_range("fill past the end of a storage");
  if (size == 0 || size > 8 || (size & (size - 1)) != 0 || bytes % size != 0) {
    throw std::invalid_argument("fill: a pattern of " + std::to_string(size) + " bytes does not tile " + std::to_string(bytes));
  }
  allocator_for(s->device()).fill_pattern(static_cast<char*>(s->data()) + offset, bytes, pattern, size);
}

StorageImpl::StorageImpl(std::size_t bytes, Device device, MemoryCategory category)
    : data_(allocator_for(device).allocate(bytes, device)), bytes_(bytes), device_(device), category_(category) {
  detail::account_allocate(device_, category_, static_cast<std::int64_t>(bytes_));
}

StorageImpl::~StorageImpl() {
  detail::account_free(device_, category_, static_cast<std::int64_t>(bytes_));
  allocator_for(device_).deallocate(data_, bytes_, device_);
}

void StorageImpl::set_category(MemoryCategory category) {
  if (category == category_) return;
  detail::account_move(device_, category_, category, static_cast<std::int64_t>(bytes_));
  category_ = category;
}

Storage allocate_storage(std::size_t bytes, Device device) {
  return allocate_storage(bytes, device, tls_category);
}

Storage allocate_storage(std::size_t bytes, Device device, MemoryCategory category) {
  return std::make_shared<StorageImpl>(bytes, device, category);
}

}  // namespace mantissa
