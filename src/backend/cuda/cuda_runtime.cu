// The CUDA backend's runtime: errors as exceptions, the stream, the device allocator (the caching
// allocator of caching_allocator.h on cudaMalloc, registered for DeviceType::cuda at load time) with its
// byte moves, and what cuda_info() reports.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "../caching_allocator.h"
#include "cublaslt_api.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "mantissa/backend/cuda.h"
#include "mantissa/core/storage.h"

namespace mantissa {
namespace detail::cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(std::string(what) + ": CUDA error " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Runs the wait `sync`, counted and timed.
template <class Sync>
cudaError_t counted_wait(Sync sync) noexcept {
  note_device_wait();
  const auto start = std::chrono::steady_clock::now();
  const cudaError_t e = sync();
  note_waited(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return e;
}

cudaError_t wait_for_stream_status(cudaStream_t s) noexcept {
  return counted_wait([s] { return cudaStreamSynchronize(s); });
}
cudaError_t wait_for_event_status(cudaEvent_t e) noexcept {
  return counted_wait([e] { return cudaEventSynchronize(e); });
}
void wait_for_stream(cudaStream_t s, const char* what) { check(wait_for_stream_status(s), what); }
void wait_for_event(cudaEvent_t e, const char* what) { check(wait_for_event_status(e), what); }

cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t made = nullptr;
    check(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking), "creating the CUDA stream");
    return made;
  }();
  return s;
}

ElementType element_type(DType t) {
  ElementType e{t, {}, {}};
  if (t != DType::f32 && t != DType::f64) {
    e.decode = make_decode_params(format_of(t));
    e.encode = make_encode_params(format_of(t), CastOptions{});
  }
  return e;
}

namespace {

// Pinned host memory that host data (ids, targets, a batch of images: up to kLargest bytes) passes
// through on its way to the GPU, so that its copy is queued like a kernel and the host goes on. A copy
// from the caller's memory would have to be waited for (the caller may free it on return), and every
// wait drains the GPU's queue: a GPT-2 step uploads ids and targets about 30 times (the classifier's
// blocks each take their targets). A ring of slots, each reused once the copy that last read it has run
// (its event).
class IndexStaging {
 public:
  // Larger copies wait instead: 32 slots grown to this size hold 128 MiB of pinned memory at most.
  static constexpr std::size_t kLargest = std::size_t{4} << 20;

  void upload(void* dst, const void* src, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (s.done == nullptr) check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "indices to cuda");
    // Its last copy has run, as a rule (32 copies ago); the host waits only where it has not.
    if (s.used) {
      const cudaError_t done = cudaEventQuery(s.done);
      if (done == cudaErrorNotReady) {
        wait_for_event(s.done, "staging to cuda");
      } else {
        check(done, "staging to cuda");
      }
    }
    if (s.bytes < bytes) {
      if (s.host != nullptr) check(cudaFreeHost(s.host), "indices to cuda");
      s.host = nullptr;
      s.bytes = 0;
      const std::size_t size = std::max<std::size_t>(bytes, std::size_t{64} << 10);
      check(cudaMallocHost(&s.host, size), "indices to cuda");
      s.bytes = size;
    }
    std::memcpy(s.host, src, bytes);
    check(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream()), "staging to cuda");
    check(cudaEventRecord(s.done, stream()), "staging to cuda");
    s.used = true;
  }

 private:
  struct Slot {
    void* host = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  std::mutex mutex_;
  std::array<Slot, 32> slots_;
  std::size_t next_ = 0;
};

IndexStaging& index_staging() {
  static IndexStaging* staging = new IndexStaging;  // kept to the end: pinned memory freed at exit by the driver
  return *staging;
}

}  // namespace

Tensor indices_on_gpu(std::span<const std::int64_t> values, Device device) {
  // f64 has the size of int64: the bytes are copied as they are, never read as doubles.
  Tensor t = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::f64, device);
  if (!values.empty()) index_staging().upload(t.data(), values.data(), values.size_bytes());
  return t;
}

void refuse_f64(const char* what, const Tensor& t) {
  if (t.defined() && t.dtype() == DType::f64) {
    throw std::invalid_argument(std::string(what) + ": f64 tensors are for checks on the CPU's reference backend; cuda computes in f32");
  }
}

namespace {

// Copies of one element's pattern (T: its size) over n elements.
template <class T>
__global__ void fill_kernel(T* out, std::int64_t n, T value) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

template <class T>
void fill_as(void* p, std::size_t bytes, const void* pattern) {
  T value;
  std::memcpy(&value, pattern, sizeof value);
  const auto n = static_cast<std::int64_t>(bytes / sizeof value);
  fill_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<T*>(p), n, value);
  check_launch("fill on cuda");
}

// The pattern passed by value to a kernel: nothing goes through host memory or waits.
void fill_on_gpu(void* p, std::size_t bytes, const void* pattern, std::size_t size) {
  if (bytes == 0) return;
  switch (size) {
    case 1: check(cudaMemsetAsync(p, *static_cast<const unsigned char*>(pattern), bytes, stream()), "fill on cuda"); return;
    case 2: fill_as<std::uint16_t>(p, bytes, pattern); return;
    case 4: fill_as<std::uint32_t>(p, bytes, pattern); return;
    default: fill_as<std::uint64_t>(p, bytes, pattern); return;
  }
}

// cudaMalloc and cudaFree of the device the allocator serves.
class CudaMemory final : public DeviceMemory {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the caller gives the cache back and tries again
      return nullptr;
    }
    check(e, "cudaMalloc");
    return p;
  }
  void free(void* p) override {
    // Blocks go back only when nothing queued can still use them.
    wait_for_device("cudaFree");
    check(cudaFree(p), "cudaFree");
  }
};

// One GPU per process (cuda:0; pick it with CUDA_VISIBLE_DEVICES, as each data-parallel rank would).
class CudaAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes, Device device) override {
    if (!cuda_available()) throw std::runtime_error("cuda:0: " + cuda_info().unavailable);
    if (device.index != 0) {
      throw std::invalid_argument("cuda:" + std::to_string(device.index) +
                                  ": one GPU per process, cuda:0 (choose it with CUDA_VISIBLE_DEVICES)");
    }
    void* p = cache().allocate(bytes);
    // Tests poison new memory with 0xFF bytes (NaN in every float format) to catch unwritten outputs.
    if (allocation_poisoning() && bytes > 0) check(cudaMemsetAsync(p, 0xff, bytes, stream()), "poisoning cuda memory");
    return p;
  }
  void deallocate(void* p, std::size_t, Device) override { cache().free(p); }
  // A copy into pageable host memory returns only once it has run, so cudaMemcpyAsync itself waits for
  // everything queued before it: the copy and the sync after it are timed together, as one wait (timed
  // apart, the wait read 0.0 ms and the queue's drain went unseen).
  void copy_to_host(void* host, const void* src, std::size_t bytes) override {
    check(counted_wait([&] {
            const cudaError_t e = cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream());
            return e != cudaSuccess ? e : cudaStreamSynchronize(stream());
          }),
          "copy from cuda");
  }
  void copy_from_host(void* dst, const void* host, std::size_t bytes) override {
    if (bytes <= IndexStaging::kLargest) {  // queued from pinned memory; the host goes on
      index_staging().upload(dst, host, bytes);
      return;
    }
    // The host buffer may go away on return: copied and waited for, timed as one wait (as above).
    check(counted_wait([&] {
            const cudaError_t e = cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream());
            return e != cudaSuccess ? e : cudaStreamSynchronize(stream());
          }),
          "copy to cuda");
  }
  void copy_within(void* dst, const void* src, std::size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "copy on cuda");
  }
  void fill_zero(void* p, std::size_t bytes) override { check(cudaMemsetAsync(p, 0, bytes, stream()), "zero fill on cuda"); }
  void fill_pattern(void* p, std::size_t bytes, const void* pattern, std::size_t size) override {
    fill_on_gpu(p, bytes, pattern, size);
  }
  std::size_t cached_bytes() override {
    const CachingAllocatorStats s = cache().stats();
    return s.reserved - s.allocated;
  }
  void release_cache() override { cache().release_cache(); }

 private:
  static CachingAllocator& cache() {
    static CudaMemory memory;
    static CachingAllocator* c = new CachingAllocator(memory, "cuda:0");  // never destroyed, as the CPU's
    return *c;
  }
};

const bool registered = [] {
  static CudaAllocator allocator;
  register_allocator(DeviceType::cuda, &allocator);
  return true;
}();

bool allow_tf32 = false;

}  // namespace

void keep_allocator_registration() { (void)registered; }

}  // namespace detail::cuda

CudaInfo cuda_info() {
  CudaInfo info;
  info.built = true;
  info.architectures = MANTISSA_CUDA_ARCHITECTURES;
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  // cuBLASLt is loaded at the first product on a GPU (cublaslt_api.h); here, the version it was built with.
  info.versions = "CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
                  ", cuBLASLt " + std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) + " headers";
  info.kernels = {
      {"copy and cast", "f64 f32 f16 bf16 e4m3 e5m2, the CPU's rounding bits"},
      {"elementwise (binary, unary and their backward)", "f32 f16 bf16, computed in f32"},
      {"loss scaling (scale and check)", "f32 f16 bf16"},
      {"optimizer (SGD, Adam/AdamW, master-weight write-back with stochastic rounding)", "f32 master, f32 f16 bf16 gradients"},
      {"matmul (cuBLASLt; epilogues: bias, bias gradient; accumulating: beta = 1)", "f32 (TF32 only when allowed), f16 and bf16 with f32 accumulation"},
      {"softmax, log-softmax and the attention softmax (scaled, causal), with their backward", "f32 f16 bf16, in f32"},
      {"cross-entropy (label smoothing, ignored index) and its backward", "f32 f16 bf16 logits, softmax in f32 from them"},
      {"layer norm and its backward", "f32 f16 bf16, statistics in f32"},
      {"reductions (sum, mean, max over any axes)", "f32 f16 bf16, summed in f32"},
      {"embedding and its backward", "f32 f16 bf16 weights, f32 gradient (atomic adds)"},
      {"max and average pooling and their backward", "f32 f16 bf16, computed in f32"},
      {"batch norm (training) and its backward", "f32 f16 bf16, statistics summed in f64"},
      {"LSTM cell and its backward", "f32 f16 bf16 gates and state, computed in f32"},
      {"numerics telemetry (zeros, non-finite, log2 histogram, counts past limits)", "f32 f16 bf16 e4m3 e5m2, in f64"},
      {"fp8 amax, quantization (delayed and current scaling, saturating) and the scaled product",
       "per-tensor scaled values held in e4m3 e5m2 and multiplied on fp8 tensor cores (capability 8.9+, sizes "
       "multiples of 16, unless MANTISSA_FP8_PRODUCTS=emulated), block-scaled ones held in bf16 on the bf16 path "
       "(as on the CPU)"},
#ifdef MANTISSA_WITH_CUDNN
      {"convolution and its backward (cuDNN)", "f32 (TF32 only when allowed), f16 and bf16 with f32 accumulation"},
#endif
  };
  info.fused_attention = detail::cuda::fused_attention_summary();
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    info.unavailable = std::string("no usable GPU: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    (void)cudaGetLastError();
    return info;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    info.devices.push_back({p.name, p.major, p.minor, static_cast<std::int64_t>(p.totalGlobalMem), p.multiProcessorCount});
  }
  if (info.devices.empty()) {
    info.unavailable = "no GPU found";
    return info;
  }
  try {
    info.versions += "; loaded cuBLASLt " + std::to_string(detail::cuda::cublaslt().GetVersion());
  } catch (const std::exception& e) {
    info.unavailable = e.what();  // no products without it
  }
#ifdef MANTISSA_WITH_CUDNN
  try {
    info.versions += ", cuDNN " + detail::cuda::cudnn_version();
  } catch (const std::exception& e) {
    info.versions += std::string(", no cuDNN (convolutions fail): ") + e.what();
  }
#endif
  return info;
}

bool cuda_available() {
  static const bool available = [] { return cuda_info().unavailable.empty(); }();
  return available;
}

void cuda_synchronize() {
  if (cuda_available()) detail::cuda::wait_for_device("cuda_synchronize");
}

void set_cuda_allow_tf32(bool allow) { detail::cuda::allow_tf32 = allow; }
bool cuda_allow_tf32() { return detail::cuda::allow_tf32; }

}  // namespace mantissa
