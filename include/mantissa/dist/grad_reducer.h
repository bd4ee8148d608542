// Averages the parameters' gradients across the ranks of a data-parallel run, bucket by bucket, while
// backward is still running (as PyTorch's DistributedDataParallel does): parameters are grouped into
// buckets in the reverse of their order (the order backward finishes them), and a bucket is sent by a
// gradient thread as soon as its last gradient is complete, in bucket order on every rank.
//
// The reduction: each rank rounds its gradients once to the wire format (f32, bf16 or fp16) and sends
// chunk j of the bucket to rank j (all-to-all); rank j adds the ranks' chunks in f32, in rank order, divides
// by the number of ranks and rounds the mean once to the wire format; an all-gather brings every chunk's
// mean to every rank, which writes it into the gradients in their own dtype. So the sum is never rounded
// to the wire format along the way (f32 accumulation), the bytes sent are those of the wire format (bf16 or
// fp16: half of f32's), and every rank ends with the same bits. An inf or NaN on any rank reaches every
// rank's gradients, so the loss scaler's check skips the same steps everywhere.
//
// Parameters on a GPU: the same arithmetic through NCCL (device_reducer.h), each bucket's work queued on
// the GPU from the hook itself, on a stream of its own, with no gradient thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mantissa/autograd/node.h"
#include "mantissa/core/dtype.h"
#include "mantissa/core/tensor.h"
#include "mantissa/dist/device_reducer.h"
#include "mantissa/dist/process_group.h"

namespace mantissa::dist {

struct ReducerOptions {
  DType wire = DType::f32;                  // f32, bf16 or f16
  std::int64_t bucket_bytes = 1 << 20;      // a bucket's gradients, counted in f32 bytes
  bool overlap = true;                      // false: every bucket sent after backward, one after another
};

// One step's communication.
struct ReducerStats {
  std::int64_t bytes_sent = 0;   // payload bytes this rank sent
  double comm_seconds = 0;       // the gradient thread's time packing, sending and unpacking buckets (on a
                                 // GPU: the host's time queueing them)
  double exposed_seconds = 0;    // of it, the time finish() waited after backward (not hidden)
  int buckets = 0;
  int launched_in_backward = 0;  // buckets already handed to the gradient thread when backward ended
};

class GradReducer final : public GradReadyHook {
 public:
  // params: the trained parameters, in the optimizer's order.
  GradReducer(std::shared_ptr<ProcessGroup> group, std::vector<Tensor> params, ReducerOptions options);
  ~GradReducer() override;
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // A backward pass whose gradients are to be averaged begins: install this as its GradReadyHook.
  void begin();
  // A parameter's gradient is complete (the hook); sends its bucket once the bucket is whole.
  void ready(const Tensor& leaf) override;
  // After backward, finished or not: parameters without a gradient get a zero one (every rank must send
  // every bucket), the remaining buckets are sent, and it returns once every gradient holds the average.
  // Rethrows what the gradient thread met (a DistributedError).
  ReducerStats finish();

  const ReducerOptions& options() const { return options_; }
  // Whether the buckets go through NCCL on a GPU (the parameters are there) rather than the ProcessGroup.
  bool on_gpu() const { return gpu_ != nullptr; }
  int buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Slot {
    Tensor param;
    Tensor grad;                   // set when ready
    std::int64_t offset = 0;       // in the bucket's elements
  };
  struct Bucket {
    std::vector<Slot> slots;
    std::int64_t elements = 0, pending = 0;
  };

  void mark_ready(std::size_t bucket, std::size_t slot, const Tensor& grad);
  void launch_ready_buckets();  // with mutex_ held
  void reduce(Bucket& b);       // on the gradient thread
  void reduce_on_device(Bucket& b);  // queued on the GPU from the calling thread
  void run_thread();
  std::int64_t bytes_sent() const;  // the group's and NCCL's

  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions options_;
  Device device_ = Device::cpu();          // the parameters'
  std::unique_ptr<DeviceReducer> gpu_;     // set when they are on a GPU
  std::vector<Bucket> buckets_;
  std::unordered_map<const TensorImpl*, std::pair<std::size_t, std::size_t>> where_;  // param -> bucket, slot
  std::vector<float> sum_;                    // the gradient thread's f32 scratch
  std::vector<std::byte> send_, recv_, mean_, gathered_;

  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::size_t next_launch_ = 0, launched_ = 0, reduced_ = 0;
  bool active_ = false, stop_ = false;
  std::exception_ptr error_;
  double comm_seconds_ = 0;
  std::int64_t bytes_at_begin_ = 0;
  int launched_in_backward_ = 0;
  std::thread thread_;
};

}  // namespace mantissa::dist
