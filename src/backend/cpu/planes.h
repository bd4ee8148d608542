// (image, channel) planes of contiguous NCHW tensors as f32, for the pooling and batch-norm loops: read in
// place when f32 (or, for loops templated on their input, bf16), else converted through a scratch buffer,
// and rounded back once.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "rows.h"

namespace mantissa::detail {

inline void load_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* out) {
  for (std::int64_t at = 0; at < size; at += kRowBlock) {
    load_f32(t, plane * size + at, 1, std::min(kRowBlock, size - at), out + at);
  }
}

inline void store_plane(const Tensor& t, std::int64_t plane, std::int64_t size, const float* in) {
  for (std::int64_t at = 0; at < size; at += kRowBlock) {
    store_f32(t, plane * size + at, 1, std::min(kRowBlock, size - at), in + at);
  }
}

// Plane `plane` of a contiguous tensor as f32 to read: the tensor's own memory when it is f32, else
// converted into scratch.
inline const float* read_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch) {
  if (t.dtype() == DType::f32) return t.data_as<float>() + plane * size;
  load_plane(t, plane, size, scratch);
  return scratch;
}

// Where to compute plane `plane` of a contiguous output: its own memory when f32 (then finish_plane
// does nothing), else scratch, which finish_plane rounds into it.
inline float* write_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch) {
  return t.dtype() == DType::f32 ? t.data_as<float>() + plane * size : scratch;
}

inline void finish_plane(const Tensor& t, std::int64_t plane, std::int64_t size, const float* computed) {
  if (t.dtype() != DType::f32) store_plane(t, plane, size, computed);
}

// A plane's value as f32: an f32 as it is; a bf16 widened exactly (the top half of an f32's bits) as it is
// loaded, so that a loop templated on its input reads a bf16 plane in place rather than an f32 copy.
inline float f32_of(float v) { return v; }
inline float f32_of(std::uint16_t bf16) { return std::bit_cast<float>(static_cast<std::uint32_t>(bf16) << 16); }

// A plane to read: f32 or bf16 in place, any other dtype converted into `scratch` (f32); `use` gets its
// values' pointer (const float* or const std::uint16_t*), for loops that read through f32_of.
template <class Use>
void with_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch, Use&& use) {
  if (t.dtype() == DType::bf16) {
    use(static_cast<const std::uint16_t*>(t.data()) + plane * size);
  } else {
    use(read_plane(t, plane, size, scratch));
  }
}

}  // namespace mantissa::detail
