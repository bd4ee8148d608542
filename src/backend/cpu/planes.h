// (image, channel) planes of contiguous NCHW tensors as f32, for the pooling and batch-norm loops: read in
// place when f32 (or, for loops templated on their input, bf16), else converted through a scratch buffer,
// and rounded back once. A plane is one case of a span (n elements from an element offset), which the
// pooling also walks across planes.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "rows.h"

namespace mantissa::detail {

// n elements of a dense tensor's memory (contiguous or channels-last) from element offset `off`, as f32
// into out; and the reverse, rounding.
inline void load_span(const Tensor& t, std::int64_t off, std::int64_t n, float* out) {
  for (std::int64_t at = 0; at < n; at += kRowBlock) load_f32(t, off + at, 1, std::min(kRowBlock, n - at), out + at);
}

inline void store_span(const Tensor& t, std::int64_t off, std::int64_t n, const float* in) {
  for (std::int64_t at = 0; at < n; at += kRowBlock) store_f32(t, off + at, 1, std::min(kRowBlock, n - at), in + at);
}

inline void load_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* out) {
  load_span(t, plane * size, size, out);
}

inline void store_plane(const Tensor& t, std::int64_t plane, std::int64_t size, const float* in) {
  store_span(t, plane * size, size, in);
}

// n elements from offset `off` of a dense tensor's memory as f32 to read: the tensor's own memory when it
// is f32, else converted into scratch.
inline const float* read_span(const Tensor& t, std::int64_t off, std::int64_t n, float* scratch) {
  if (t.dtype() == DType::f32) return t.data_as<float>() + off;
  load_span(t, off, n, scratch);
  return scratch;
}

inline const float* read_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch) {
  return read_span(t, plane * size, size, scratch);
}

// Where to compute plane `plane` of a contiguous output: its own memory when f32 (then finish_plane
// does nothing), else scratch, which finish_plane rounds into it.
inline float* write_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch) {
  return t.dtype() == DType::f32 ? t.data_as<float>() + plane * size : scratch;
}

inline void finish_plane(const Tensor& t, std::int64_t plane, std::int64_t size, const float* computed) {
  if (t.dtype() != DType::f32) store_plane(t, plane, size, computed);
}


// A span to read: f32 or bf16 in place, any other dtype converted into `scratch` (f32); `use` gets its
// values' pointer (const float* or const std::uint16_t*), for loops that read through f32_of.
template <class Use>
void with_span(const Tensor& t, std::int64_t off, std::int64_t n, float* scratch, Use&& use) {
  if (t.dtype() == DType::bf16) {
    use(static_cast<const std::uint16_t*>(t.data()) + off);
  } else {
    use(read_span(t, off, n, scratch));
  }
}

template <class Use>
void with_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch, Use&& use) {
  with_span(t, plane * size, size, scratch, use);
}

}  // namespace mantissa::detail
