// The scaled product's operands (kernels.h's ScaledMatmul) as a bf16 product takes them. A per-tensor
// FP8 operand is held in its grid's storage dtype (e4m3 or e5m2, one byte a value); a backend without
// fp8 products (the CPU, a GPU before Ada, a call the fp8 kernels refuse) widens it to bf16 here, the one
// place that does: exact, since bf16 holds every e4m3 and e5m2 value, infinities and NaN included.
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "mantissa/core/tensor.h"

namespace mantissa::detail {

// t as bf16 (t itself unless its dtype is storage only), by the backend's copy(src, dst). The copy keeps
// t's layout where t covers its storage densely (a contiguous operand or a transpose of one, as the FP8
// layer gives them), so the product runs the kernel, and sums in the order, it would for a bf16 operand
// of that layout; any other view is copied contiguously.
template <class Copy>
Tensor widened_operand(const Tensor& t, Copy copy) {
  if (!is_storage_only(t.dtype())) return t;
  const std::size_t dims = t.shape().size();
  // The dimensions from the innermost stride out; dense when each stride is the product of the sizes
  // inside it (size-1 dimensions, whose stride is never used, are skipped).
  std::vector<std::size_t> order(dims);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t.strides()[a] < t.strides()[b]; });
  std::int64_t span = 1;
  bool dense = true;
  for (const std::size_t d : order) {
    if (t.shape()[d] == 1) continue;
    dense = dense && t.strides()[d] == span;
    span *= t.shape()[d];
  }
  if (!dense) {
    const Tensor wide = Tensor::empty(t.shape(), DType::bf16, t.device());
    copy(t, wide);
    return wide;
  }
  // Dense: the storage span converted as one flat run (no strided walk), then seen as t is.
  const Tensor flat = Tensor::empty({t.numel()}, DType::bf16, t.device());
  copy(make_view(t, {t.numel()}, {1}, t.offset()), flat);
  return make_view(flat, t.shape(), t.strides(), 0);
}

}  // namespace mantissa::detail
