// Gradient averaging between GPU ranks, over NCCL (what every framework uses between NVIDIA GPUs): the
// GradReducer's arithmetic (each rank's gradients rounded once to the wire format, chunk j of a bucket
// sent to rank j, the ranks' chunks added in f32 in rank order, the mean rounded once and gathered
// everywhere), done on the GPU, on a stream of its own so that it overlaps the rest of backward. The
// NCCL communicator is bootstrapped over the job's ProcessGroup (MPI): rank 0's unique id is broadcast.
//
// GradReducer uses it by itself when the parameters are on a GPU; the CPU path is unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "mantissa/core/device.h"
#include "mantissa/core/dtype.h"
#include "mantissa/core/tensor.h"
#include "mantissa/dist/process_group.h"

namespace mantissa::dist {

// Whether this build can talk NCCL, which version it loaded, or why not.
struct NcclInfo {
  bool built = false;       // compiled with NCCL's header (a CUDA build that found nccl.h)
  std::string version;      // "2.28.9" once loaded; empty when it cannot be
  std::string unavailable;  // why NCCL cannot be used here; empty when it can
};
NcclInfo nccl_info();

class DeviceReducer {
 public:
  virtual ~DeviceReducer() = default;
  // Queues the averaging of one bucket: `grads` (contiguous, on the GPU, whole tensors in their own
  // dtypes) packed one after another into `elements` values in the wire format (f32, bf16 or f16). It
  // starts after the work queued on the GPU so far (their last gradient's kernels) and returns at once.
  // Every rank queues the same buckets in the same order.
  virtual void reduce(std::span<const Tensor> grads, std::int64_t elements, DType wire) = 0;
  // Waits for every queued bucket; the GPU's own stream then runs after them. Throws DistributedError on
  // an NCCL error, after which this reducer cannot be used. A rank that died or hangs: the wait is marked
  // on the ProcessGroup, whose watchdog stops the job past its timeout.
  virtual void wait() = 0;
  // Payload bytes sent to other ranks so far, by the same arithmetic as the ProcessGroup's.
  virtual std::int64_t bytes_sent() const = 0;
};

// An NCCL communicator over `group`'s ranks, one GPU each (this process's `device`). Every rank calls it
// at the same point. Throws DistributedError saying why when NCCL cannot be used (not built, library not
// found, no GPU).
std::unique_ptr<DeviceReducer> make_nccl_reducer(ProcessGroup& group, Device device);

}  // namespace mantissa::dist
