// The CPU backend's elementwise machinery: operands are walked as rows (the last dimension, after
// merging dimensions that are contiguous in every operand), and each row segment is converted to f32
// in a buffer (or read and written in place where it is contiguous f32, or contiguous bf16 for the loops
// that take it), computed on, and rounded once into the output dtype by the bulk conversion's rule.
#pragma once

#include "../../numeric/encode_rules.h"
#include "../../numeric/vector_clones.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "mantissa/core/tensor.h"

namespace mantissa::detail {

// Row segments are at most this long, so the f32 buffers of a thread stay in L1/L2.
inline constexpr std::int64_t kRowBlock = 2048;

// Sum of n floats in 16 independent lanes: error growth near eps (n / 16 + 16), and vectorizable.
inline float sum_f32(const float* v, std::int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += v[i + l];
  }
  float s = 0;
  for (; i < n; ++i) s += v[i];
  for (int l = 0; l < kLanes; ++l) s += lanes[l];
  return s;
}

// n elements from element offset `off` of t's storage (relative to t.data()), `stride` apart, as f32.
void load_f32(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, float* out);
// The reverse, rounding to nearest even into t's dtype.
void store_f32(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, const float* in);

// Whether a segment of t is read and written where it is: f32 and contiguous.
inline bool f32_in_place(const Tensor& t, std::int64_t stride) { return t.dtype() == DType::f32 && stride == 1; }
// The same for loops that also take bf16 bits (templated on their storage, reading through f32_of and
// writing through store_as): bf16 and contiguous.
inline bool bf16_in_place(const Tensor& t, std::int64_t stride) { return t.dtype() == DType::bf16 && stride == 1; }

// An element as f32 and back, for loops templated on their storage: an f32 as it is; a bf16 widened
// exactly (the top half of an f32's bits) as it is loaded, and rounded by bf16_bits_of (the bulk
// conversion's rule) as it is stored. The same bits as a trip through load_f32 and store_f32 (a NaN comes
// out quiet either way).
inline float f32_of(float v) { return v; }
inline float f32_of(std::uint16_t bf16) { return std::bit_cast<float>(static_cast<std::uint32_t>(bf16) << 16); }
inline void store_as(float& to, float v) { to = v; }
inline void store_as(std::uint16_t& to, float v) { to = bf16_bits_of(v); }

// The f32 elements a loop reads: t's own where f32_in_place (no copy), else loaded into buf. The same
// arithmetic either way, so the same bits.
inline const float* f32_source(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, float* buf) {
  if (f32_in_place(t, stride)) return t.data_as<float>() + off;
  load_f32(t, off, stride, n, buf);
  return buf;
}
// Where a loop writes its f32 results: t's own elements where f32_in_place, else buf, which f32_finish
// then rounds into t.
inline float* f32_destination(const Tensor& t, std::int64_t off, std::int64_t stride, float* buf) {
  return f32_in_place(t, stride) ? t.data_as<float>() + off : buf;
}
inline void f32_finish(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, const float* written) {
  if (!f32_in_place(t, stride)) store_f32(t, off, stride, n, written);
}

// Row r of a 2-D tensor [R, C] as f32 into v (C values), in kRowBlock pieces; and the reverse, rounding.
inline void load_row(const Tensor& t, std::int64_t r, float* v) {
  const std::int64_t cols = t.size(1);
  for (std::int64_t at = 0; at < cols; at += kRowBlock) {
    load_f32(t, r * t.strides()[0] + at * t.strides()[1], t.strides()[1], std::min(kRowBlock, cols - at), v + at);
  }
}
inline void load_row(const Tensor& t, std::int64_t r, std::vector<float>& v) { load_row(t, r, v.data()); }
inline void store_row(const Tensor& t, std::int64_t r, const std::vector<float>& v) {
  const std::int64_t cols = t.size(1);
  for (std::int64_t at = 0; at < cols; at += kRowBlock) {
    store_f32(t, r * t.strides()[0] + at * t.strides()[1], t.strides()[1], std::min(kRowBlock, cols - at), v.data() + at);
  }
}

// The iteration space of operands sharing `shape`, with dimensions merged where every operand is
// contiguous across them. rows() rows of row_length() elements; row_offsets(r) gives each operand's
// offset of row r; the stride along a row is inner_stride(k).
class RowSpace {
 public:
  RowSpace(const Shape& shape, std::vector<Shape> strides);
  std::int64_t rows() const { return rows_; }
  std::int64_t row_length() const { return length_; }
  std::int64_t inner_stride(std::size_t k) const { return inner_[k]; }
  void row_offsets(std::int64_t r, std::int64_t* out) const;

 private:
  Shape outer_shape_;
  std::vector<Shape> outer_strides_;
  std::vector<std::int64_t> inner_;
  std::int64_t rows_ = 1;
  std::int64_t length_ = 1;
};

}  // namespace mantissa::detail
