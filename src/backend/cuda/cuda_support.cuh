// What every CUDA kernel file shares: CUDA errors turned into one-line exceptions naming the op, the one
// stream all of a device's work is queued on (so the caching allocator may reuse a freed block at once),
// element loads and stores of every dtype with the CPU's own rounding rule (encode_rules.h, compiled for
// the device too, so casts give the CPU's bits), and strided indexing (strided.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include "../../numeric/encode_rules.h"
#include "strided.h"
#include "mantissa/core/tensor.h"

namespace mantissa::detail::cuda {

// Throws std::runtime_error "<what>: CUDA error <name> (<description>)" unless e is cudaSuccess.
void check(cudaError_t e, const char* what);
// After a kernel launch: a launch error (bad configuration, no kernel image for this GPU) names the op.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// The stream all work on the current GPU is queued on.
cudaStream_t stream();

// The host waits for the GPU: for everything queued on the stream, or for an event. Every wait of the
// CUDA backend is one of these, which count it (note_device_wait, storage.h): a wait drains the GPU's
// queue, and a step should have one. (tests/unit/host_device_traffic_test.cpp fails where a source file
// synchronizes or copies to the host any other way.)
void wait_for_stream(cudaStream_t s, const char* what);
inline void wait_for_device(const char* what) { wait_for_stream(stream(), what); }
void wait_for_event(cudaEvent_t e, const char* what);
// For destructors and code that reports errors later: the wait counted, its error returned.
cudaError_t wait_for_stream_status(cudaStream_t s) noexcept;
cudaError_t wait_for_event_status(cudaEvent_t e) noexcept;

inline constexpr int kThreads = 256;

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);  // grid-stride loops do the rest
}

// The dtype of a tensor with what loads and stores need, passed to kernels by value.
struct ElementType {
  DType dtype;
  DecodeParams decode;
  EncodeParams encode;  // nearest even, not saturating: the CPU's cast
};
ElementType element_type(DType t);

// bf16 and f16 patterns to f32 and back by the hardware's conversions, which give the CPU's rule's bits
// (encode_rules.h: nearest even, infinities and subnormals included, as the GPU cast tests check on
// every pattern) for every value but NaN, which takes the rule written out (bf16_nan_of, ...: sign and
// payload kept, made quiet). No format parameters: a kernel's registers hold none of them.
__device__ inline float bf16_to_f32(std::uint16_t bits) {
  const std::uint32_t w = std::uint32_t{bits} << 16;
  return __uint_as_float((bits & 0x7fffU) > 0x7f80U ? f32_nan_of_bf16(bits) : w);
}
__device__ inline float f16_to_f32(std::uint16_t bits) {
  return (bits & 0x7fffU) > 0x7c00U ? __uint_as_float(f32_nan_of_f16(bits)) : __half2float(__ushort_as_half(bits));
}
__device__ inline std::uint16_t f32_to_bf16(float v) {
  return v != v ? bf16_nan_of(__float_as_uint(v)) : __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ inline std::uint16_t f32_to_f16(float v) {
  return v != v ? f16_nan_of(__float_as_uint(v)) : __half_as_ushort(__float2half_rn(v));
}

// The value of element i (in elements from base) as float; f64 is read as double and narrowed, which
// only Copy avoids (it keeps f64 exact).
__device__ inline float load(const ElementType& t, const void* base, std::int64_t i) {
  switch (t.dtype) {
    case DType::f64: return static_cast<float>(static_cast<const double*>(base)[i]);
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::e4m3:
    case DType::e5m2: return __uint_as_float(decode_bits(t.decode, static_cast<const std::uint8_t*>(base)[i]));
  }
  return 0;
}

// The format's pattern of v rounded by the CPU's rule (`random` for stochastic rounding only).
__device__ inline std::uint32_t encode_value(const EncodeParams& p, float v, std::uint32_t random = 0) {
  return encode_bits(p, __float_as_uint(v), random);
}

__device__ inline void store(const ElementType& t, void* base, std::int64_t i, float v) {
  switch (t.dtype) {
    case DType::f64: static_cast<double*>(base)[i] = v; return;
    case DType::f32: static_cast<float*>(base)[i] = v; return;
    case DType::f16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(v); return;
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(v); return;
    case DType::e4m3:
    case DType::e5m2: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(encode_value(t.encode, v)); return;
  }
}

// a * b with the CPU's NaNs, for kernels whose results must be the CPU's bits (the loss scaler's pass,
// the quantizers): on x86 a NaN operand comes out as it went in, made quiet (a's when both are), and a
// NaN the product makes itself (0 x inf) is the default NaN 0xffc00000; the GPU writes 0x7fffffff for
// every NaN result.
__device__ inline float mul_as_cpu(float a, float b) {
  if (a != a) return __uint_as_float(__float_as_uint(a) | 0x400000U);
  if (b != b) return __uint_as_float(__float_as_uint(b) | 0x400000U);
  const float p = a * b;
  return p != p ? __uint_as_float(0xffc00000U) : p;
}

// A 2-D view's rows and columns: element (r, c) at r * row + c * col (in elements).
struct Rows {
  std::int64_t rows, cols, row, col;
};
inline Rows rows_of(const Tensor& t) { return {t.size(0), t.size(1), t.strides()[0], t.strides()[1]}; }

// The grid of a kernel that takes a row a block.
inline unsigned row_blocks(std::int64_t rows, const char* what) {
  if (rows > 0x7fffffff) throw std::invalid_argument(std::string(what) + ": too many rows for one launch");
  return static_cast<unsigned>(rows);
}

// Sum over a warp (all 32 lanes take part); every lane gets the result, added in the same order every run.
template <class T>
__device__ inline T warp_sum(T v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffU, v, d);
  return v;
}

// Sum (in f32 or f64) and max over a block of kThreads threads; every thread gets the result, added in
// the same order every run. `scratch` holds one value per warp.
template <class T>
__device__ inline T block_sum(T v, T* scratch) {
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}
__device__ inline float block_max(float v, float* scratch) {
  for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffU, v, d));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

// A host array (ids, targets) copied to the GPU for the duration of a kernel: an int64 tensor of the
// caching allocator, freed when the handle goes (stream order keeps it alive for the kernel). The copy
// is queued through pinned memory; the host does not wait for the GPU.
Tensor indices_on_gpu(std::span<const std::int64_t> values, Device device);

// Totals that kernels add into on the GPU (counts, sums, maxima as ordered patterns): zeroed memory of
// the caching allocator, read back once through copy_bytes (a counted copy, waiting for the GPU); or the
// caller's zeroed bytes (`left`: a kernel's place for totals the caller reads later, read_later.h).
template <class T>
class DeviceTotals {
 public:
  explicit DeviceTotals(Device device, const Tensor& left = Tensor())
      : left_(left.defined()), bytes_(left_ ? left : Tensor::zeros({static_cast<std::int64_t>(sizeof(T))}, DType::e4m3, device)) {}
  T* get() const { return static_cast<T*>(bytes_.data()); }
  // Whether the totals are the caller's to read.
  bool left() const { return left_; }
  T read() const {
    const Tensor host = bytes_.to(Device::cpu());
    T value{};
    std::memcpy(&value, host.data(), sizeof value);
    return value;
  }

 private:
  bool left_;
  Tensor bytes_;
};

// f64 tensors exist for checks, which run on the reference backend; the CUDA kernels compute in f32.
void refuse_f64(const char* what, const Tensor& t);

}  // namespace mantissa::detail::cuda
