// Element access for the reference kernels: by (row, column) or index of a strided 2-D or 1-D tensor,
// and by (n, c, h, w) of a contiguous 4-D one, read as double and stored rounding once.
#pragma once

#include "../../core/element_io.h"
#include "mantissa/core/tensor.h"

namespace mantissa::detail {

inline double at(const Tensor& t, std::int64_t r, std::int64_t c) {
  return load_element(t.dtype(), t.data(), r * t.strides()[0] + c * t.strides()[1]);
}
inline double at1(const Tensor& t, std::int64_t i) { return load_element(t.dtype(), t.data(), i * t.strides()[0]); }
inline void put(const Tensor& t, std::int64_t r, std::int64_t c, double v) {
  store_element(t.dtype(), t.data(), r * t.strides()[0] + c * t.strides()[1], v);
}
inline void put1(const Tensor& t, std::int64_t i, double v) { store_element(t.dtype(), t.data(), i * t.strides()[0], v); }

// Element (a, b, c, d) of a contiguous 4-D tensor.
struct View4 {
  const Tensor& t;
  std::int64_t d1, d2, d3;
  explicit View4(const Tensor& x) : t(x), d1(x.size(1)), d2(x.size(2)), d3(x.size(3)) {}
  std::int64_t index(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return ((a * d1 + b) * d2 + c) * d3 + d;
  }
  double get(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return load_element(t.dtype(), t.data(), index(a, b, c, d));
  }
  void set(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, double v) const {
    store_element(t.dtype(), t.data(), index(a, b, c, d), v);
  }
};

}  // namespace mantissa::detail
