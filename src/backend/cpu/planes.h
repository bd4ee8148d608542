// (image, channel) planes of contiguous NCHW tensors as f32, for the pooling and batch-norm loops: read in
// place when f32, else converted through a scratch buffer, and rounded back once.
#pragma once

#include <algorithm>

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

}  // namespace mantissa::detail
