// The caching allocator's rules: best fit from the pool, split what is left over, merge free neighbours,
// new segments only when the pool has nothing that fits, and the cache given back before giving up.
#include "caching_allocator.h"

#include <cstdio>
#include <vector>

namespace mantissa::detail {
namespace {

std::size_t round_up(std::size_t n, std::size_t q) { return (n + q - 1) / q * q; }

std::string mib(std::size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

}  // namespace

CachingAllocator::CachingAllocator(DeviceMemory& memory, std::string name) : memory_(memory), name_(std::move(name)) {}

CachingAllocator::~CachingAllocator() {
  // Blocks still in use (tensors that outlive the allocator) keep their segments; the rest go back.
  std::lock_guard lock(mutex_);
  release_free_segments();
}

CachingAllocator::Block* CachingAllocator::take_free_block(Pool& pool, std::size_t size) {
  Block key{nullptr, size, false};
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  // A remainder worth keeping becomes a free block of its own: any quantum in the small pool; in the
  // large pool only past a small request, so big segments are not cut into slivers.
  const std::size_t rest = b->size - size;
  if (b->small ? rest >= kQuantum : rest > kSmallRequest) {
    auto* r = new Block{b->ptr + size, rest, b->small};
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
  }
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(std::size_t segment_bytes, bool small) {
  void* p = memory_.allocate(segment_bytes);
  if (p == nullptr) {
    release_free_segments();  // the device is full: give the cache back and ask once more
    p = memory_.allocate(segment_bytes);
    if (p == nullptr) return nullptr;
  }
  ++stats_.device_allocations;
  ++stats_.segments;
  stats_.reserved += segment_bytes;
  return new Block{static_cast<char*>(p), segment_bytes, small};
}

void* CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes, kQuantum);
  const bool small = size <= kSmallRequest;
  std::lock_guard lock(mutex_);
  Pool& pool = small ? small_pool_ : large_pool_;
  Block* b = take_free_block(pool, size);
  if (b == nullptr) {
    Block* segment = new_segment(small ? kSmallSegment : round_up(size, kLargeQuantum), small);
    if (segment == nullptr) throw DeviceOutOfMemory(out_of_memory_message(size));
    pool.insert(segment);
    b = take_free_block(pool, size);
  }
  b->in_use = true;
  in_use_[b->ptr] = b;
  stats_.allocated += b->size;
  return b->ptr;
}

void CachingAllocator::free(void* p) {
  std::lock_guard lock(mutex_);
  auto it = in_use_.find(p);
  if (it == in_use_.end()) throw std::invalid_argument(name_ + ": freeing memory this allocator did not hand out");
  Block* b = it->second;
  in_use_.erase(it);
  stats_.allocated -= b->size;
  b->in_use = false;
  Pool& pool = b->small ? small_pool_ : large_pool_;
  // Merge with free neighbours in the segment, so that the segment can serve a large request again.
  if (Block* n = b->next; n != nullptr && !n->in_use) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    delete n;
  }
  if (Block* q = b->prev; q != nullptr && !q->in_use) {
    pool.erase(q);
    q->size += b->size;
    q->next = b->next;
    if (b->next != nullptr) b->next->prev = q;
    delete b;
    b = q;
  }
  pool.insert(b);
}

void CachingAllocator::release_free_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    std::vector<Block*> whole;
    for (Block* b : *pool) {
      if (b->prev == nullptr && b->next == nullptr) whole.push_back(b);  // a free block that is its segment
    }
    for (Block* b : whole) {
      pool->erase(b);
      memory_.free(b->ptr);
      ++stats_.device_frees;
      --stats_.segments;
      stats_.reserved -= b->size;
      delete b;
    }
  }
}

void CachingAllocator::release_cache() {
  std::lock_guard lock(mutex_);
  release_free_segments();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::string CachingAllocator::out_of_memory_message(std::size_t bytes) const {
  return name_ + ": out of memory: asked for " + mib(bytes) + " with " + mib(stats_.allocated) +
         " in use by tensors and " + mib(stats_.reserved) + " reserved in all (the cache was given back first)";
}

}  // namespace mantissa::detail
