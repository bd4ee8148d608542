// Embedding lookups on the CPU: rows gathered in f32 (threads split the rows), and the backward's
// scatter-add into an f32 gradient (threads split the columns, since rows may repeat).
#include <algorithm>
#include <vector>

#include "cpu_kernels.h"
#include "rows.h"

namespace mantissa::detail {

void cpu_embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) {
  const std::int64_t d = weight.size(1);
  const auto n = static_cast<std::int64_t>(ids.size());
#pragma omp parallel if (n * d >= (1 << 15))
  {
    std::vector<float> v(static_cast<std::size_t>(d));
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      load_row(weight, ids[static_cast<std::size_t>(i)], v);
      store_row(out, i, v);
    }
  }
}

void cpu_embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) {
  // Rows may repeat, so threads split the columns, not the rows.
  const std::int64_t d = grad_weight.size(1);
  float* gw = grad_weight.data_as<float>();
  const std::int64_t gw_row = grad_weight.strides()[0];
#pragma omp parallel for schedule(static) if (static_cast<std::int64_t>(ids.size()) * d >= (1 << 15))
  for (std::int64_t c0 = 0; c0 < d; c0 += 64) {
    const std::int64_t n = std::min<std::int64_t>(64, d - c0);
    float buf[64];
    for (std::size_t i = 0; i < ids.size(); ++i) {
      load_f32(grad_out, static_cast<std::int64_t>(i) * grad_out.strides()[0] + c0 * grad_out.strides()[1],
               grad_out.strides()[1], n, buf);
      float* row = gw + ids[i] * gw_row + c0;
      for (std::int64_t k = 0; k < n; ++k) row[k] += buf[k];
    }
  }
}

}  // namespace mantissa::detail
