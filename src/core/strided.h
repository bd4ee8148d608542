// Walking the elements of strided tensors in row-major order: the one loop every generic kernel (the
// reference backend, copies, printing) is built on. For each element it passes the element offset of
// each of up to four tensors that share the iteration shape (broadcast inputs have stride 0).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "mantissa/core/tensor.h"

namespace mantissa::detail {

template <class Fn>
void for_each_offset(const Shape& shape, std::initializer_list<Shape> strides, Fn&& fn) {
  constexpr std::size_t kMax = 4;
  const std::size_t n = strides.size();
  const std::size_t rank = shape.size();
  for (std::int64_t s : shape) {
    if (s == 0) return;
  }
  std::array<const Shape*, kMax> st{};
  std::size_t k = 0;
  for (const Shape& s : strides) st[k++] = &s;
  std::vector<std::int64_t> index(rank, 0);
  std::array<std::int64_t, kMax> off{};
  while (true) {
    fn(off.data());
    // Advance the last dimension; carry into earlier ones.
    std::size_t d = rank;
    while (d > 0) {
      --d;
      ++index[d];
      for (std::size_t t = 0; t < n; ++t) off[t] += (*st[t])[d];
      if (index[d] < shape[d]) break;
      for (std::size_t t = 0; t < n; ++t) off[t] -= (*st[t])[d] * shape[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

}  // namespace mantissa::detail
