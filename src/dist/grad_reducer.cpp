// The bucketed gradient all-reduce with a wire format and f32 accumulation; see
// mantissa/dist/grad_reducer.h.
#include "mantissa/dist/grad_reducer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "mantissa/core/memory.h"
#include "mantissa/numeric/bulk.h"

namespace mantissa::dist {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// n elements of dtype `from` at src into dtype `to` at dst (f32 in between; `scratch` holds it when
// neither end is f32).
void convert(DType from, const void* src, DType to, void* dst, std::size_t n, std::vector<float>& scratch) {
  if (n == 0) return;
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
  } else if (from == DType::f32) {
    encode_array(format_of(to), static_cast<const float*>(src), dst, n);
  } else if (to == DType::f32) {
    decode_array(format_of(from), src, static_cast<float*>(dst), n);
  } else {
    scratch.resize(n);
    decode_array(format_of(from), src, scratch.data(), n);
    encode_array(format_of(to), scratch.data(), dst, n);
  }
}

}  // namespace

GradReducer::GradReducer(std::shared_ptr<ProcessGroup> group, std::vector<Tensor> params, ReducerOptions options)
    : group_(std::move(group)), options_(options) {
  if (options_.wire != DType::f32 && options_.wire != DType::bf16 && options_.wire != DType::f16) {
    throw std::invalid_argument("gradient reduction: the wire format must be f32, bf16 or f16, not " +
                                std::string(dtype_name(options_.wire)));
  }
  if (options_.bucket_bytes < 1) throw std::invalid_argument("gradient reduction: bucket_bytes must be positive");
  // Backward finishes the last parameters first: buckets from the end of the list.
  std::reverse(params.begin(), params.end());
  bool first = true;
  for (Tensor& p : params) {
    if (!p.requires_grad()) continue;
    if (first) {
      device_ = p.device();
      first = false;
    } else if (!(p.device() == device_)) {
      throw std::invalid_argument("gradient reduction: parameters on " + device_.str() + " and on " + p.device().str());
    }
    if (buckets_.empty() || buckets_.back().elements * 4 >= options_.bucket_bytes) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    where_[p.impl()] = {buckets_.size() - 1, b.slots.size()};
    b.slots.push_back({p, Tensor(), b.elements});
    b.elements += p.numel();
  }
  if (device_.type == DeviceType::cuda) {
    gpu_ = make_nccl_reducer(*group_, device_);
  } else {
    thread_ = std::thread([this] { run_thread(); });
  }
}

GradReducer::~GradReducer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GradReducer::begin() {
  std::lock_guard lock(mutex_);
  if (reduced_ != launched_) throw std::logic_error("gradient reduction: begin() while buckets are in flight");
  for (Bucket& b : buckets_) {
    b.pending = static_cast<std::int64_t>(b.slots.size());
    for (Slot& s : b.slots) s.grad = Tensor();
  }
  next_launch_ = launched_ = reduced_ = 0;
  comm_seconds_ = 0;
  bytes_at_begin_ = bytes_sent();
  error_ = nullptr;
  active_ = true;
}

void GradReducer::ready(const Tensor& leaf) {
  const auto it = where_.find(leaf.impl());
  if (it == where_.end()) return;
  std::lock_guard lock(mutex_);
  if (!active_) return;
  mark_ready(it->second.first, it->second.second, leaf.grad());
  if (options_.overlap) launch_ready_buckets();
}

void GradReducer::mark_ready(std::size_t bucket, std::size_t slot, const Tensor& grad) {
  Slot& s = buckets_[bucket].slots[slot];
  if (s.grad.defined()) return;  // a second pass through the same leaf: the gradient object is the same
  if (!grad.is_contiguous() || grad.offset() != 0 || grad.dtype() != s.param.dtype()) {
    throw std::logic_error("gradient reduction: a gradient not contiguous in its parameter's dtype");
  }
  s.grad = grad;
  --buckets_[bucket].pending;
}

void GradReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) ++next_launch_;
  if (next_launch_ <= launched_) return;
  if (gpu_) {
    // Queued on the GPU from here, in bucket order; finish() waits for them.
    for (; launched_ < next_launch_; ++launched_) {
      const auto t0 = Clock::now();
      if (!error_) {
        try {
          reduce_on_device(buckets_[launched_]);
        } catch (...) {
          error_ = std::current_exception();
        }
      }
      comm_seconds_ += seconds_since(t0);
    }
    reduced_ = launched_;
    return;
  }
  launched_ = next_launch_;
  work_.notify_one();
}

ReducerStats GradReducer::finish() {
  {
    // Parameters whose gradients did not arrive through the hook (no hook, an interrupted backward, or a
    // parameter unused by this batch): the gradient they have, or zeros.
    std::lock_guard lock(mutex_);
    if (!active_) throw std::logic_error("gradient reduction: finish() without begin()");
    launched_in_backward_ = static_cast<int>(launched_);
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      for (std::size_t i = 0; i < buckets_[b].slots.size(); ++i) {
        Slot& s = buckets_[b].slots[i];
        if (s.grad.defined()) continue;
        if (!s.param.grad().defined()) {
          MemoryCategoryScope scope(MemoryCategory::gradients);
          s.param.set_grad(Tensor::zeros(s.param.shape(), s.param.dtype(), device_));
        }
        mark_ready(b, i, s.param.grad());
      }
    }
    launch_ready_buckets();
  }
  const auto t0 = Clock::now();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return reduced_ == buckets_.size(); });
  if (gpu_ && !error_) {
    try {
      gpu_->wait();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  ReducerStats stats;
  stats.exposed_seconds = seconds_since(t0);
  stats.comm_seconds = comm_seconds_;
  stats.buckets = static_cast<int>(buckets_.size());
  stats.launched_in_backward = launched_in_backward_;
  active_ = false;
  for (Bucket& b : buckets_) {
    for (Slot& s : b.slots) s.grad = Tensor();
  }
  if (error_) std::rethrow_exception(error_);
  stats.bytes_sent = bytes_sent() - bytes_at_begin_;
  return stats;
}

std::int64_t GradReducer::bytes_sent() const { return group_->bytes_sent() + (gpu_ ? gpu_->bytes_sent() : 0); }

void GradReducer::reduce_on_device(Bucket& b) {
  std::vector<Tensor> grads;
  grads.reserve(b.slots.size());
  for (const Slot& s : b.slots) grads.push_back(s.grad);
  gpu_->reduce(grads, b.elements, options_.wire);
}

void GradReducer::run_thread() {
  omp_set_num_threads(1);  // its conversions are small; the cores belong to the training thread's kernels
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || reduced_ < launched_; });
    if (stop_) return;
    Bucket& b = buckets_[reduced_];
    const bool failed = error_ != nullptr;
    lock.unlock();
    const auto t0 = Clock::now();
    std::exception_ptr error;
    if (!failed) {
      try {
        reduce(b);
      } catch (...) {
        error = std::current_exception();
      }
    }
    const double seconds = seconds_since(t0);
    lock.lock();
    comm_seconds_ += seconds;
    if (error && !error_) error_ = error;
    ++reduced_;
    done_.notify_all();
  }
}

void GradReducer::reduce(Bucket& b) {
  const auto n = static_cast<std::size_t>(group_->size());
  const std::size_t chunk = (static_cast<std::size_t>(b.elements) + n - 1) / n;
  const DType wire = options_.wire;
  const std::size_t w = dtype_size(wire);
  std::vector<float> scratch;
  send_.assign(chunk * n * w, std::byte{0});
  for (const Slot& s : b.slots) {
    convert(s.grad.dtype(), s.grad.data(), wire, send_.data() + static_cast<std::size_t>(s.offset) * w,
            static_cast<std::size_t>(s.grad.numel()), scratch);
  }
  recv_.resize(send_.size());
  group_->all_to_all(send_, recv_);
  // This rank's chunk: the ranks' values added in f32, in rank order, then the mean rounded once.
  sum_.assign(chunk, 0.0f);
  std::vector<float> part(chunk);
  for (std::size_t r = 0; r < n; ++r) {
    convert(wire, recv_.data() + r * chunk * w, DType::f32, part.data(), chunk, scratch);
    for (std::size_t i = 0; i < chunk; ++i) sum_[i] += part[i];
  }
  const auto ranks = static_cast<float>(n);
  for (float& v : sum_) v /= ranks;
  mean_.resize(chunk * w);
  convert(DType::f32, sum_.data(), wire, mean_.data(), chunk, scratch);
  gathered_.resize(chunk * n * w);
  group_->all_gather(mean_, gathered_);
  for (const Slot& s : b.slots) {
    convert(wire, gathered_.data() + static_cast<std::size_t>(s.offset) * w, s.grad.dtype(), s.grad.data(),
            static_cast<std::size_t>(s.grad.numel()), scratch);
  }
}

}  // namespace mantissa::dist
