// Row segments to and from f32 buffers, and the merged iteration space of elementwise operands.
#include "rows.h"

#include <cstring>

#include "mantissa/numeric/bulk.h"
#include "mantissa/numeric/convert.h"

namespace mantissa::detail {
namespace {

template <class Bits>
void gather_bits(const Bits* p, std::int64_t stride, std::int64_t n, Bits* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = p[i * stride];
}

template <class Bits>
void load_packed(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, float* out) {
  const Format f = format_of(t.dtype());
  const Bits* p = static_cast<const Bits*>(t.data()) + off;
  if (stride == 1) {
    decode_array(f, p, out, static_cast<std::size_t>(n));
  } else if (stride == 0) {
    const float v = decode(f, p[0]);
    for (std::int64_t i = 0; i < n; ++i) out[i] = v;
  } else {
    Bits tmp[kRowBlock];
    gather_bits(p, stride, n, tmp);
    decode_array(f, tmp, out, static_cast<std::size_t>(n));
  }
}

template <class Bits>
void store_packed(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, const float* in) {
  const Format f = format_of(t.dtype());
  Bits* p = static_cast<Bits*>(t.data()) + off;
  if (stride == 1) {
    encode_array(f, in, p, static_cast<std::size_t>(n));
    return;
  }
  Bits tmp[kRowBlock];
  encode_array(f, in, tmp, static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[i * stride] = tmp[i];
}

}  // namespace

void load_f32(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, float* out) {
  switch (t.dtype()) {
    case DType::f32: {
      const float* p = t.data_as<float>() + off;
      if (stride == 1) {
        std::memcpy(out, p, static_cast<std::size_t>(n) * sizeof(float));
      } else {
        for (std::int64_t i = 0; i < n; ++i) out[i] = p[i * stride];
      }
      return;
    }
    case DType::f64: {
      const double* p = t.data_as<double>() + off;
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i * stride]);
      return;
    }
    case DType::f16:
    case DType::bf16: load_packed<std::uint16_t>(t, off, stride, n, out); return;
    case DType::e4m3:
    case DType::e5m2: load_packed<std::uint8_t>(t, off, stride, n, out); return;
  }
}

void store_f32(const Tensor& t, std::int64_t off, std::int64_t stride, std::int64_t n, const float* in) {
  switch (t.dtype()) {
    case DType::f32: {
      float* p = t.data_as<float>() + off;
      if (stride == 1) {
        std::memcpy(p, in, static_cast<std::size_t>(n) * sizeof(float));
      } else {
        for (std::int64_t i = 0; i < n; ++i) p[i * stride] = in[i];
      }
      return;
    }
    case DType::f64: {
      double* p = t.data_as<double>() + off;
      for (std::int64_t i = 0; i < n; ++i) p[i * stride] = in[i];
      return;
    }
    case DType::f16:
    case DType::bf16: store_packed<std::uint16_t>(t, off, stride, n, in); return;
    case DType::e4m3:
    case DType::e5m2: store_packed<std::uint8_t>(t, off, stride, n, in); return;
  }
}

RowSpace::RowSpace(const Shape& shape, std::vector<Shape> strides) {
  // Drop dimensions of size 1, then merge neighbours that every operand steps across contiguously.
  Shape dims;
  std::vector<Shape> st(strides.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool merge = !dims.empty() && [&] {
      for (std::size_t k = 0; k < strides.size(); ++k) {
        if (st[k].back() != strides[k][d] * shape[d]) return false;
      }
      return true;
    }();
    if (merge) {
      dims.back() *= shape[d];
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].back() = strides[k][d];
    } else {
      dims.push_back(shape[d]);
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].push_back(strides[k][d]);
    }
  }
  for (std::int64_t s : shape) {
    if (s == 0) rows_ = 0;
  }
  inner_.assign(strides.size(), 1);
  if (!dims.empty()) {
    length_ = dims.back();
    for (std::size_t k = 0; k < strides.size(); ++k) inner_[k] = st[k].back();
    dims.pop_back();
    for (auto& s : st) s.pop_back();
  }
  if (rows_ != 0) rows_ = numel_of(dims);
  outer_shape_ = std::move(dims);
  outer_strides_ = std::move(st);
}

void RowSpace::row_offsets(std::int64_t r, std::int64_t* out) const {
  for (std::size_t k = 0; k < outer_strides_.size(); ++k) out[k] = 0;
  for (std::size_t d = outer_shape_.size(); d-- > 0;) {
    const std::int64_t i = r % outer_shape_[d];
    r /= outer_shape_[d];
    for (std::size_t k = 0; k < outer_strides_.size(); ++k) out[k] += i * outer_strides_[k][d];
  }
}

}  // namespace mantissa::detail
