// The GPU's gradient averaging between ranks (see mantissa/dist/device_reducer.h): NCCL, loaded with
// dlopen at the first use as cuBLASLt is (so a machine without it still runs everything else), and the
// three small kernels around its transfers: pack the bucket's gradients into the wire format, add the
// ranks' chunks in f32 in rank order and round the mean once, unpack the gathered means into the
// gradients. The same arithmetic as the CPU's GradReducer, so both give the same bits.
//
// Ordering: a bucket's work goes on a stream of its own that first waits for what the GPU's stream has
// queued so far (the bucket's last gradient), so it runs while backward goes on; wait() puts the GPU's
// stream behind it again. Hangs: the host waits (communicator setup, transfers, the end of the step) are
// marked on the ProcessGroup, whose watchdog stops the job past its timeout.
#include <nccl.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "../backend/cuda/cuda_support.cuh"
#include "../backend/cuda/library_loader.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/dist/device_reducer.h"

namespace mantissa::dist {
namespace {

using detail::cuda::blocks_for;
using detail::cuda::element_type;
using detail::cuda::ElementType;
using detail::cuda::kThreads;
using detail::cuda::open_library;
using detail::cuda::Symbols;

// The NCCL functions mantissa calls, by their own types.
struct Nccl {
  decltype(&ncclGetVersion) GetVersion;
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclCommAbort) CommAbort;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
  decltype(&ncclSend) Send;
  decltype(&ncclRecv) Recv;
  decltype(&ncclAllGather) AllGather;
};

Nccl load() {
  const Symbols bind(open_library("libnccl.so." + std::to_string(NCCL_MAJOR), "NCCL"), "NCCL");
  Nccl api{};
  bind(api.GetVersion, "ncclGetVersion");
  bind(api.GetErrorString, "ncclGetErrorString");
  bind(api.GetUniqueId, "ncclGetUniqueId");
  bind(api.CommInitRank, "ncclCommInitRank");
  bind(api.CommDestroy, "ncclCommDestroy");
  bind(api.CommAbort, "ncclCommAbort");
  bind(api.CommGetAsyncError, "ncclCommGetAsyncError");
  bind(api.GroupStart, "ncclGroupStart");
  bind(api.GroupEnd, "ncclGroupEnd");
  bind(api.Send, "ncclSend");
  bind(api.Recv, "ncclRecv");
  bind(api.AllGather, "ncclAllGather");
  return api;
}

const Nccl& nccl() {
  try {
    static const Nccl api = load();  // a failed load throws, and the next call tries again
    return api;
  } catch (const std::runtime_error& e) {
    throw DistributedError(e.what());
  }
}

void check(ncclResult_t r, const char* what, int rank) {
  if (r == ncclSuccess) return;
  throw DistributedError(std::string("NCCL ") + what + " failed on rank " + std::to_string(rank) + ": " +
                         nccl().GetErrorString(r));
}

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw DistributedError(std::string("gradient all-reduce on the GPU: ") + what + ": CUDA error " + cudaGetErrorName(e) +
                         " (" + cudaGetErrorString(e) + ")");
}

ncclDataType_t nccl_type(DType wire) {
  switch (wire) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default: throw std::invalid_argument("gradient all-reduce: the wire format must be f32, bf16 or f16");
  }
}

__global__ void convert_kernel(std::int64_t n, ElementType from, const void* src, ElementType to, void* dst) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    detail::cuda::store(to, dst, i, detail::cuda::load(from, src, i));
  }
}

// mean[i] = (0 + chunk_0[i] + chunk_1[i] + ...) / ranks in f32, rounded once to the wire format.
__global__ void mean_kernel(std::int64_t chunk, int ranks, ElementType wire, const void* received, void* mean) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < chunk;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < ranks; ++r) sum += detail::cuda::load(wire, received, r * chunk + i);
    detail::cuda::store(wire, mean, i, sum / static_cast<float>(ranks));
  }
}

// n elements from one dtype to another on `stream` (a byte copy when they are the same).
void convert(DType from, const void* src, DType to, void* dst, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (from == to) {
    check_cuda(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * dtype_size(from), cudaMemcpyDeviceToDevice, stream),
               "copying a gradient");
    return;
  }
  convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, element_type(from), src, element_type(to), dst);
  check_cuda(cudaGetLastError(), "converting a gradient");
}

// A device buffer that only grows (buckets keep their sizes from step to step).
class Buffer {
 public:
  ~Buffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  std::byte* at_least(std::size_t bytes, cudaStream_t stream) {
    if (bytes <= bytes_) return data_;
    if (data_ != nullptr) {
      check_cuda(detail::cuda::wait_for_stream_status(stream), "growing a buffer");
      check_cuda(cudaFree(data_), "growing a buffer");
      data_ = nullptr;
      bytes_ = 0;
    }
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes), "allocating the reduction buffers");
    data_ = static_cast<std::byte*>(p);
    bytes_ = bytes;
    return data_;
  }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class NcclReducer final : public DeviceReducer {
 public:
  NcclReducer(ProcessGroup& group, Device device) : group_(group), rank_(group.rank()), ranks_(group.size()) {
    if (device.type != DeviceType::cuda) throw DistributedError("NCCL reduces gradients on a GPU, not on " + device.str());
    if (!cuda_available()) throw DistributedError("NCCL: " + cuda_info().unavailable);
    const Nccl& api = nccl();
    ncclUniqueId id{};
    if (rank_ == 0) check(api.GetUniqueId(&id), "unique id", rank_);
    group_.broadcast(std::as_writable_bytes(std::span(&id, 1)), 0);
    {
      const WaitScope waiting(group_, "NCCL communicator setup");
      check(api.CommInitRank(&comm_, ranks_, id, rank_), "communicator setup", rank_);
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating the communication stream");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "creating an event");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "creating an event");
  }

  ~NcclReducer() override {
    // After a failure the transfers may never end: abort them first, then wait.
    if (comm_ != nullptr && failed_) nccl().CommAbort(comm_);
    if (stream_ != nullptr) (void)detail::cuda::wait_for_stream_status(stream_);
    if (comm_ != nullptr && !failed_) nccl().CommDestroy(comm_);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  NcclReducer(const NcclReducer&) = delete;
  NcclReducer& operator=(const NcclReducer&) = delete;

  void reduce(std::span<const Tensor> grads, std::int64_t elements, DType wire) override {
    if (failed_) throw DistributedError("gradient all-reduce on the GPU: NCCL failed earlier in this run");
    if (elements == 0) return;
    const Nccl& api = nccl();
    const ncclDataType_t type = nccl_type(wire);
    const std::size_t w = dtype_size(wire);
    const auto n = static_cast<std::size_t>(ranks_);
    const std::size_t chunk = (static_cast<std::size_t>(elements) + n - 1) / n;
    std::byte* send = send_.at_least(chunk * n * w, stream_);
    std::byte* recv = recv_.at_least(chunk * n * w, stream_);
    std::byte* mean = mean_.at_least(chunk * w, stream_);
    std::byte* gathered = gathered_.at_least(chunk * n * w, stream_);

    // After the gradients' kernels: pack them into the wire format, the padding zero.
    check_cuda(cudaEventRecord(ready_, detail::cuda::stream()), "ordering after backward");
    check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "ordering after backward");
    std::int64_t offset = 0;
    for (const Tensor& g : grads) {
      check_gradient(g);
      convert(g.dtype(), g.data(), wire, send + static_cast<std::size_t>(offset) * w, g.numel(), stream_);
      offset += g.numel();
    }
    if (offset != elements) throw std::logic_error("gradient all-reduce: the bucket's gradients do not add up to its size");
    const std::size_t padding = chunk * n - static_cast<std::size_t>(elements);
    if (padding > 0) check_cuda(cudaMemsetAsync(send + elements * w, 0, padding * w, stream_), "zeroing the padding");

    {
      const WaitScope waiting(group_, "gradient all-reduce (NCCL)");
    note_device_wait();  // the polls below are the host waiting for the GPU
      // Chunk r to rank r, and every rank's chunk for this one back (an all-to-all).
      guard(api.GroupStart(), "all-to-all");
      for (std::size_t r = 0; r < n; ++r) {
        guard(api.Send(send + r * chunk * w, chunk, type, static_cast<int>(r), comm_, stream_), "all-to-all");
        guard(api.Recv(recv + r * chunk * w, chunk, type, static_cast<int>(r), comm_, stream_), "all-to-all");
      }
      guard(api.GroupEnd(), "all-to-all");
      mean_kernel<<<blocks_for(static_cast<std::int64_t>(chunk)), kThreads, 0, stream_>>>(
          static_cast<std::int64_t>(chunk), ranks_, element_type(wire), recv, mean);
      check_cuda(cudaGetLastError(), "adding the ranks' gradients");
      guard(api.AllGather(mean, gathered, chunk, type, comm_, stream_), "all-gather");
    }

    offset = 0;
    for (const Tensor& g : grads) {
      convert(wire, gathered + static_cast<std::size_t>(offset) * w, g.dtype(), g.data(), g.numel(), stream_);
      offset += g.numel();
    }
    bytes_sent_ += static_cast<std::int64_t>(2 * (n - 1) * chunk * w);
  }

  void wait() override {
    if (failed_) throw DistributedError("gradient all-reduce on the GPU: NCCL failed earlier in this run");
    check_cuda(cudaEventRecord(done_, stream_), "ordering the step after the all-reduce");
    check_cuda(cudaStreamWaitEvent(detail::cuda::stream(), done_, 0), "ordering the step after the all-reduce");
    // Wait on the host too, polling NCCL for errors a hung or failed transfer reports only this way.
    const WaitScope waiting(group_, "gradient all-reduce (NCCL)");
    note_device_wait();  // the polls below are the host waiting for the GPU
    for (int polls = 0;; ++polls) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        failed_ = true;
        check_cuda(e, "waiting for the all-reduce");
      }
      ncclResult_t async = ncclSuccess;
      guard(nccl().CommGetAsyncError(comm_, &async), "all-reduce");
      guard(async, "all-reduce");
      if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::int64_t bytes_sent() const override { return bytes_sent_; }

 private:
  static void check_gradient(const Tensor& g) {
    if (g.device().type != DeviceType::cuda || !g.is_contiguous()) {
      throw std::logic_error("gradient all-reduce on the GPU: a gradient not contiguous on the GPU");
    }
  }
  // An NCCL error leaves the communicator unusable: it is aborted, not destroyed, at the end.
  void guard(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) failed_ = true;
    check(r, what, rank_);
  }

  ProcessGroup& group_;
  int rank_, ranks_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  Buffer send_, recv_, mean_, gathered_;
  std::int64_t bytes_sent_ = 0;
  bool failed_ = false;
};

}  // namespace

NcclInfo nccl_info() {
  NcclInfo info;
  info.built = true;
  try {
    int code = 0;
    check(nccl().GetVersion(&code), "version", 0);
    info.version = std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
  } catch (const std::exception& e) {
    info.unavailable = e.what();
    return info;
  }
  if (!cuda_available()) info.unavailable = "no GPU to run it on: " + cuda_info().unavailable;
  return info;
}

std::unique_ptr<DeviceReducer> make_nccl_reducer(ProcessGroup& group, Device device) {
  return std::make_unique<NcclReducer>(group, device);
}

}  // namespace mantissa::dist
