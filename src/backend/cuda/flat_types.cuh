// The elementwise kernels' fast path (cuda_elementwise.cu): operands contiguous alike, their dtypes f32,
// bf16 or f16 known at compile time, so a thread does not switch on a dtype, and reads and writes 8
// elements at a time where every operand is 16-byte aligned. Conversions are load's and store's
// (cuda_support.cuh: the hardware's, NaN by the CPU's rule), so every value gets the CPU's bits.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda_support.cuh"

namespace mantissa::detail::cuda {

// The raw patterns of bf16 and f16 elements, as distinct types.
struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};

__device__ inline float to_f32(float v, const ElementType&) { return v; }
__device__ inline float to_f32(Bf16 v, const ElementType&) { return bf16_to_f32(v.bits); }
__device__ inline float to_f32(F16 v, const ElementType&) { return f16_to_f32(v.bits); }

template <class T>
__device__ inline T from_f32(float v, const ElementType& t);
template <>
__device__ inline float from_f32<float>(float v, const ElementType&) {
  return v;
}
template <>
__device__ inline Bf16 from_f32<Bf16>(float v, const ElementType&) {
  return {f32_to_bf16(v)};
}
template <>
__device__ inline F16 from_f32<F16>(float v, const ElementType&) {
  return {f32_to_f16(v)};
}

// f(static_cast<T*>(nullptr)) for dtype's element type T; false for a dtype the fast path leaves alone.
template <class F>
bool with_flat_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(static_cast<float*>(nullptr)); return true;
    case DType::bf16: f(static_cast<Bf16*>(nullptr)); return true;
    case DType::f16: f(static_cast<F16*>(nullptr)); return true;
    default: return false;
  }
}

// Eight elements, read or written as one 16-byte access (two for f32).
constexpr int kPack = 8;
template <class T>
struct alignas(16) Pack {
  T v[kPack];
};

// Whether every pointer is 16-byte aligned: the packs' condition.
inline bool packable(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Rows [R, C] a row kernel reads and writes a pack at a time (packed cross-entropy, packed layer norm):
// X one of f32, bf16 and f16, columns contiguous and a multiple of kPack, every row 16-byte aligned.
template <class X>
bool packed_rows(const Tensor& t) {
  return t.strides()[1] == 1 && t.size(1) % kPack == 0 && packable({t.data()}) &&
         (t.strides()[0] * static_cast<std::int64_t>(sizeof(X))) % 16 == 0;
}

// Blocks for a flat kernel over n elements, a thread a pack where packed.
inline unsigned flat_blocks(std::int64_t n, bool packed) { return blocks_for(packed ? (n + kPack - 1) / kPack : n); }

// out[i] = f(a[i]) (or f(a[i], b[i])) for i < n over the grid: a pack of 8 a thread where `packed`
// (packable), the rest one element at a time.
template <class O, class F, class A>
__device__ void flat_map(std::int64_t n, bool packed, F&& f, O* out, const A* a) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x, packs = packed ? n / kPack : 0;
  for (std::int64_t p = first; p < packs; p += stride) {
    const Pack<A> pa = reinterpret_cast<const Pack<A>*>(a)[p];
    Pack<O> o;
#pragma unroll
    for (int k = 0; k < kPack; ++k) o.v[k] = f(pa.v[k]);
    reinterpret_cast<Pack<O>*>(out)[p] = o;
  }
  for (std::int64_t i = packs * kPack + first; i < n; i += stride) out[i] = f(a[i]);
}
template <class O, class F, class A, class B>
__device__ void flat_map(std::int64_t n, bool packed, F&& f, O* out, const A* a, const B* b) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x, packs = packed ? n / kPack : 0;
  for (std::int64_t p = first; p < packs; p += stride) {
    const Pack<A> pa = reinterpret_cast<const Pack<A>*>(a)[p];
    const Pack<B> pb = reinterpret_cast<const Pack<B>*>(b)[p];
    Pack<O> o;
#pragma unroll
    for (int k = 0; k < kPack; ++k) o.v[k] = f(pa.v[k], pb.v[k]);
    reinterpret_cast<Pack<O>*>(out)[p] = o;
  }
  for (std::int64_t i = packs * kPack + first; i < n; i += stride) out[i] = f(a[i], b[i]);
}

// A dtype the typed paths leave to the run-time ElementType (fp8), as a type.
struct AnyDType {};

// Element i of a tensor whose dtype is T: float, Bf16 or F16 without a switch on the dtype (in a loop,
// the compiler turned load()'s switch into every dtype's conversion computed for every element), or
// AnyDType: load() and store().
template <class T>
__device__ inline float get(const ElementType& t, const void* p, std::int64_t i) {
  if constexpr (std::is_same_v<T, AnyDType>) {
    return load(t, p, i);
  } else {
    return to_f32(static_cast<const T*>(p)[i], t);
  }
}
template <class T>
__device__ inline void put(const ElementType& t, void* p, std::int64_t i, float v) {
  if constexpr (std::is_same_v<T, AnyDType>) {
    store(t, p, i, v);
  } else {
    static_cast<T*>(p)[i] = from_f32<T>(v, t);
  }
}

// f(static_cast<T*>(nullptr)) with T the dtype every one of `dtypes` has, as a type, or AnyDType where
// they differ or it is none of f32, bf16 and f16.
template <class F>
void with_one_type(std::initializer_list<DType> dtypes, F&& f) {
  bool same = true;
  for (const DType d : dtypes) same = same && d == *dtypes.begin();
  if (!same || !with_flat_type(*dtypes.begin(), f)) f(static_cast<AnyDType*>(nullptr));
}

// Whether an iteration steps through every tensor as one contiguous run (strided() merged them alike).
template <int N>
bool is_flat(const Strided<N>& it) {
  if (it.rank > 1) return false;
  for (int t = 0; t < N && it.rank == 1; ++t) {
    if (it.strides[t][0] != 1) return false;
  }
  return true;
}

}  // namespace mantissa::detail::cuda
