// Softmax and log-softmax over rows on the CPU, in f32 (softmax_rows.cpp has the per-row loops), rows
// split across threads; f32 rows are read and written in place.
#include <vector>

#include "cpu_kernels.h"
#include "rows.h"
#include "softmax_rows.h"

namespace mantissa::detail {

void cpu_softmax(const Tensor& x, const Tensor& y, bool log) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  const bool parallel = rows > 1 && rows * cols >= (1 << 14);
  // f32 rows are read and written in place; other dtypes through f32 buffers.
  const bool direct = x.dtype() == DType::f32 && y.dtype() == DType::f32 && x.strides()[1] == 1 && y.strides()[1] == 1;
#pragma omp parallel if (parallel)
  {
    std::vector<float> v(direct ? 0 : static_cast<std::size_t>(cols)), p(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = direct ? x.data_as<float>() + r * x.strides()[0] : v.data();
      float* yr = direct ? y.data_as<float>() + r * y.strides()[0] : v.data();
      if (!direct) load_f32(x, r * x.strides()[0], x.strides()[1], cols, v.data());
      const float lse = softmax_row(xr, log ? p.data() : (direct ? yr : p.data()), cols, cols, 1.0f);
      if (log) {
        // log(exp(z) / total) = z - log-sum-exp, from z itself for accuracy.
        for (std::int64_t j = 0; j < cols; ++j) yr[j] = xr[j] - lse;
      }
      if (!direct) store_f32(y, r * y.strides()[0], y.strides()[1], cols, log ? v.data() : p.data());
    }
  }
}

void cpu_softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) {
  const std::int64_t rows = y.size(0);
  const std::int64_t cols = y.size(1);
  const bool parallel = rows > 1 && rows * cols >= (1 << 14);
#pragma omp parallel if (parallel)
  {
    std::vector<float> yv(static_cast<std::size_t>(cols));
    std::vector<float> gv(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      load_f32(y, r * y.strides()[0], y.strides()[1], cols, yv.data());
      load_f32(grad_y, r * grad_y.strides()[0], grad_y.strides()[1], cols, gv.data());
      if (log) {
        log_softmax_backward_row(yv.data(), gv.data(), cols);  // gx = g - exp(y) * sum(g)
      } else {
        softmax_backward_row(yv.data(), gv.data(), gv.data(), cols, cols, 1.0f);  // gx = y * (g - sum(g * y))
      }
      store_f32(grad_x, r * grad_x.strides()[0], grad_x.strides()[1], cols, gv.data());
    }
  }
}

}  // namespace mantissa::detail
