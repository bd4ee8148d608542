// The elementwise kernels' fast path (cuda_elementwise.cu): operands contiguous alike, their dtypes f32,
// bf16 or f16 known at compile time, so a thread neither switches on a dtype nor rounds in software. The
// hardware's conversions round to nearest even as the CPU's rule does (encode_rules.h), infinities and
// subnormals included; NaN alone takes the rule's own path, which keeps the payload (the hardware writes
// its canonical NaN), so every value gets the CPU's bits, as the cast tests check on every pattern.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

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
__device__ inline float to_f32(Bf16 v, const ElementType& t) {
  return (v.bits & 0x7fffU) > 0x7f80U ? __uint_as_float(decode_bits(t.decode, v.bits)) : __uint_as_float(std::uint32_t{v.bits} << 16);
}
__device__ inline float to_f32(F16 v, const ElementType& t) {
  return (v.bits & 0x7fffU) > 0x7c00U ? __uint_as_float(decode_bits(t.decode, v.bits)) : __half2float(__ushort_as_half(v.bits));
}

template <class T>
__device__ inline T from_f32(float v, const ElementType& t);
template <>
__device__ inline float from_f32<float>(float v, const ElementType&) {
  return v;
}
template <>
__device__ inline Bf16 from_f32<Bf16>(float v, const ElementType& t) {
  return {static_cast<std::uint16_t>(v != v ? encode_value(t.encode, v) : __bfloat16_as_ushort(__float2bfloat16_rn(v)))};
}
template <>
__device__ inline F16 from_f32<F16>(float v, const ElementType& t) {
  return {static_cast<std::uint16_t>(v != v ? encode_value(t.encode, v) : __half_as_ushort(__float2half_rn(v)))};
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
