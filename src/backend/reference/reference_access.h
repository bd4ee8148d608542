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

// sum_p a[b, i, p] w[b, p, j] in double, over [B, M, K] and [B, K, N] strided views: the reference's
// products.
inline double product_at(const Tensor& a, const Tensor& w, std::int64_t b, std::int64_t i, std::int64_t j) {
  const Shape& sa = a.strides();
  const Shape& sw = w.strides();
  double s = 0;
  for (std::int64_t p = 0; p < a.size(2); ++p) {
    s += load_element(a.dtype(), a.data(), b * sa[0] + i * sa[1] + p * sa[2]) *
         load_element(w.dtype(), w.data(), b * sw[0] + p * sw[1] + j * sw[2]);
  }
  return s;
}

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
