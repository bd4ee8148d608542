// Small device values the host reads together, once a step: the step's losses, the FP8 quantizers'
// counts and amaxes. Every read of a GPU's memory waits for all the work queued before it, and a wait
// in the middle of a step leaves the GPU idle while the host queues the next kernels: a GPT-2 step in
// FP8 read its ~140 quantizers' counts one at a time. Producers take zeroed bytes on the device (slot)
// or hand over a one-element tensor (value), each with what to do once its bytes are on the host;
// read() copies them all at once (one wait for up to 64 KiB of slots) and runs those in order.
//
// A step makes one active on its thread (ActiveBatchedReads); code that may run inside a step asks
// active_batched_reads() and reads at once where there is none (a test, an evaluation).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "mantissa/core/tensor.h"

namespace mantissa {

class BatchedReads {
 public:
  using Use = std::function<void(std::span<const std::byte>)>;

  explicit BatchedReads(Device device) : device_(device) {}
  BatchedReads(const BatchedReads&) = delete;
  BatchedReads& operator=(const BatchedReads&) = delete;

  Device device() const { return device_; }
  // `bytes` zeroed bytes on the device (a contiguous 1-byte-dtype view, 16-byte aligned), their bytes
  // given to `use` at the next read().
  Tensor slot(std::size_t bytes, Use use);
  // A one-element tensor's value (any dtype, on the device), as a double, given to `use` at the next
  // read(). Copied into a slot now (no wait): the tensor may be overwritten or freed after.
  void value(const Tensor& t, std::function<void(double)> use);
  // Every slot taken since the last read(), copied to the host (one copy and one wait per 64 KiB), then
  // each use called in the order the slots were taken. The slots are gone after.
  void read();
  // Slots taken and not read yet.
  std::size_t pending() const { return pending_.size(); }

  static constexpr std::size_t kBlockBytes = std::size_t{64} << 10;

 private:
  struct Pending {
    std::size_t block, offset, bytes;
    Use use;
  };
  Device device_;
  std::vector<Tensor> blocks_;  // zeroed, each kBlockBytes (or one slot's size if larger)
  std::size_t used_ = 0;        // bytes taken of the last block
  std::vector<Pending> pending_;
};

// The batch that code running on this thread adds its reads to, or null (read at once).
BatchedReads* active_batched_reads();

// Makes `reads` the thread's active batch for its lifetime (and restores the one before).
class ActiveBatchedReads {
 public:
  explicit ActiveBatchedReads(BatchedReads& reads);
  ~ActiveBatchedReads();
  ActiveBatchedReads(const ActiveBatchedReads&) = delete;
  ActiveBatchedReads& operator=(const ActiveBatchedReads&) = delete;

 private:
  BatchedReads* previous_;
};

}  // namespace mantissa
