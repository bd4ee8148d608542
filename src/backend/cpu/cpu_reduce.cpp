// Reductions and softmax on the CPU, accumulating in f32. Reductions walk, for each output element, the
// reduced sub-space of the input as f32 row segments summed in 16 independent lanes (which bounds the
// rounding error growth and lets the compiler vectorize); outputs are split across threads.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

float segment_max(const float* v, std::int64_t n, float m) {
  for (std::int64_t i = 0; i < n; ++i) m = (std::isnan(v[i]) || v[i] > m) ? v[i] : m;
  return m;
}

}  // namespace

namespace {

// Reductions over the leading axes of a contiguous tensor (bias gradients: sum over the batch): rows of
// the kept columns are added into per-column accumulators, in blocks of 256 rows whose partial sums
// are then added (error growth near eps (256 + rows / 256) rather than eps rows). Threads split the
// columns.
void reduce_leading(ReduceOp op, const Tensor& x, std::int64_t rows, const Tensor& out) {
  const std::int64_t cols = x.numel() / rows;
  constexpr std::int64_t kBlockCols = 256;
  constexpr std::int64_t kBlockRows = 256;
  const std::int64_t blocks = (cols + kBlockCols - 1) / kBlockCols;
#pragma omp parallel for schedule(static) if (blocks > 1 && x.numel() >= (1 << 15))
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t c0 = b * kBlockCols;
    const std::int64_t n = std::min(kBlockCols, cols - c0);
    alignas(64) float buf[kBlockCols];
    alignas(64) float acc[kBlockCols];
    alignas(64) float part[kBlockCols];
    const float init = op == ReduceOp::max ? -std::numeric_limits<float>::infinity() : 0.0f;
    std::fill(acc, acc + n, init);
    std::fill(part, part + n, init);
    for (std::int64_t r = 0; r < rows; ++r) {
      load_f32(x, r * cols + c0, 1, n, buf);
      if (op == ReduceOp::max) {
        for (std::int64_t k = 0; k < n; ++k) acc[k] = (std::isnan(buf[k]) || buf[k] > acc[k]) ? buf[k] : acc[k];
        continue;
      }
      for (std::int64_t k = 0; k < n; ++k) part[k] += buf[k];
      if ((r + 1) % kBlockRows == 0 || r + 1 == rows) {
        for (std::int64_t k = 0; k < n; ++k) {
          acc[k] += part[k];
          part[k] = 0;
        }
      }
    }
    if (op == ReduceOp::mean) {
      for (std::int64_t k = 0; k < n; ++k) acc[k] /= static_cast<float>(rows);
    }
    store_f32(out, c0, 1, n, acc);
  }
}

}  // namespace

void cpu_reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out) {
  // Leading axes of a contiguous tensor, with columns left to keep: the column-sum path.
  bool leading = x.is_contiguous() && out.is_contiguous() && !axes.empty() && static_cast<std::int64_t>(axes.size()) < x.dim();
  for (std::size_t i = 0; leading && i < axes.size(); ++i) leading = axes[i] == static_cast<int>(i);
  if (leading) {
    std::int64_t rows = 1;
    for (int a : axes) rows *= x.shape()[static_cast<std::size_t>(a)];
    if (rows > 1 && x.numel() / rows > 1) return reduce_leading(op, x, rows, out);
  }
  // Kept dimensions index the outputs; the reduced ones form each output's sub-space.
  Shape kept_shape, kept_strides, red_shape, red_strides;
  for (std::size_t d = 0; d < x.shape().size(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), static_cast<int>(d)) != axes.end();
    (reduced ? red_shape : kept_shape).push_back(x.shape()[d]);
    (reduced ? red_strides : kept_strides).push_back(x.strides()[d]);
  }
  Shape out_kept_strides;
  for (std::size_t d = 0; d < out.shape().size(); ++d) {
    if (std::find(axes.begin(), axes.end(), static_cast<int>(d)) == axes.end()) {
      out_kept_strides.push_back(out.strides()[d]);
    }
  }
  const RowSpace outer(kept_shape, {kept_strides, out_kept_strides});
  const RowSpace inner(red_shape, {red_strides});
  const std::int64_t outputs = numel_of(kept_shape);
  const std::int64_t count = numel_of(red_shape);
  const bool parallel = outputs > 1 && outputs * count >= (1 << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t o = 0; o < outputs; ++o) {
    // o indexes the kept space row-major: split into outer row and position along its row.
    std::int64_t base[2];
    outer.row_offsets(o / outer.row_length(), base);
    const std::int64_t along = o % outer.row_length();
    const std::int64_t x_base = base[0] + along * outer.inner_stride(0);
    const std::int64_t out_at = base[1] + along * outer.inner_stride(1);
    alignas(64) float buf[kRowBlock];
    float acc = op == ReduceOp::max ? -std::numeric_limits<float>::infinity() : 0.0f;
    std::int64_t off[1];
    for (std::int64_t r = 0; r < inner.rows(); ++r) {
      inner.row_offsets(r, off);
      for (std::int64_t at = 0; at < inner.row_length(); at += kRowBlock) {
        const std::int64_t n = std::min(kRowBlock, inner.row_length() - at);
        load_f32(x, x_base + off[0] + at * inner.inner_stride(0), inner.inner_stride(0), n, buf);
        acc = op == ReduceOp::max ? segment_max(buf, n, acc) : acc + sum_f32(buf, n);
      }
    }
    if (op == ReduceOp::mean) acc /= static_cast<float>(count);
    store_f32(out, out_at, 1, 1, &acc);
  }
}

void cpu_softmax(const Tensor& x, const Tensor& y, bool log) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  const bool parallel = rows > 1 && rows * cols >= (1 << 14);
#pragma omp parallel if (parallel)
  {
    std::vector<float> v(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      load_f32(x, r * x.strides()[0], x.strides()[1], cols, v.data());
      const float mx = segment_max(v.data(), cols, -std::numeric_limits<float>::infinity());
      for (float& e : v) e = std::exp(e - mx);
      const float total = sum_f32(v.data(), cols);
      if (log) {
        // log(exp(z) / total) = z - log(total), from z itself for accuracy: reload z.
        load_f32(x, r * x.strides()[0], x.strides()[1], cols, v.data());
        const float shift = mx + std::log(total);
        for (float& e : v) e -= shift;
      } else {
        const float inv = 1.0f / total;
        for (float& e : v) e *= inv;
      }
      store_f32(y, r * y.strides()[0], y.strides()[1], cols, v.data());
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
        // gx = g - exp(y) * sum(g)
        const float s = sum_f32(gv.data(), cols);
        for (std::int64_t c = 0; c < cols; ++c) gv[c] -= std::exp(yv[c]) * s;
      } else {
        // gx = y * (g - sum(g * y))
        float dot = 0;
        for (std::int64_t c = 0; c < cols; ++c) dot += gv[c] * yv[c];
        for (std::int64_t c = 0; c < cols; ++c) gv[c] = yv[c] * (gv[c] - dot);
      }
      store_f32(grad_x, r * grad_x.strides()[0], grad_x.strides()[1], cols, gv.data());
    }
  }
}

}  // namespace mantissa::detail
