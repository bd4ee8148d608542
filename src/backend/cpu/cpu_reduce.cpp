// Reductions on the CPU, accumulating in f32. Reductions walk, for each output element, the
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

// A block of rows (each `cols` apart) of the columns [c0, c0 + n) reduced into part[0, n): summed, or
// their maximum (NaN wins).
MANTISSA_VECTOR_CLONES void reduce_rows(bool max, const float* rows, std::int64_t count, std::int64_t stride,
                                        std::int64_t n, float* part) {
  for (std::int64_t r = 0; r < count; ++r) {
    const float* row = rows + r * stride;
    if (max) {
      for (std::int64_t k = 0; k < n; ++k) part[k] = (std::isnan(row[k]) || row[k] > part[k]) ? row[k] : part[k];
    } else {
      for (std::int64_t k = 0; k < n; ++k) part[k] += row[k];
    }
  }
}

// Reductions over the leading axes of a contiguous tensor (bias gradients: sum over the batch). The rows
// are cut into chunks of 256, each chunk's column sums computed on its own (chunks and column blocks
// split across threads), then the chunks' sums added in chunk order: error growth near
// eps (256 + rows / 256) rather than eps rows, and the same result whatever the thread count.
void reduce_leading(ReduceOp op, const Tensor& x, std::int64_t rows, const Tensor& out) {
  const std::int64_t cols = x.numel() / rows;
  constexpr std::int64_t kBlockCols = 256;
  constexpr std::int64_t kChunkRows = 256;
  const bool max = op == ReduceOp::max;
  const float init = max ? -std::numeric_limits<float>::infinity() : 0.0f;
  const std::int64_t blocks = (cols + kBlockCols - 1) / kBlockCols;
  const std::int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::vector<float> partial(static_cast<std::size_t>(chunks * cols), init);
#pragma omp parallel for collapse(2) schedule(static) if (chunks * blocks > 1 && x.numel() >= (1 << 15))
  for (std::int64_t ch = 0; ch < chunks; ++ch) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t c0 = b * kBlockCols, n = std::min(kBlockCols, cols - c0);
      const std::int64_t r0 = ch * kChunkRows, count = std::min(kChunkRows, rows - r0);
      alignas(64) float buf[kChunkRows * kBlockCols / 16];  // 16 rows at a time
      float* part = partial.data() + ch * cols + c0;
      for (std::int64_t r = 0; r < count; r += 16) {
        const std::int64_t m = std::min<std::int64_t>(16, count - r);
        for (std::int64_t i = 0; i < m; ++i) load_f32(x, (r0 + r + i) * cols + c0, 1, n, buf + i * kBlockCols);
        reduce_rows(max, buf, m, kBlockCols, n, part);
      }
    }
  }
  std::vector<float> acc(partial.begin(), partial.begin() + cols);
  for (std::int64_t ch = 1; ch < chunks; ++ch) {
    reduce_rows(max, partial.data() + ch * cols, 1, cols, cols, acc.data());
  }
  if (op == ReduceOp::mean) {
    for (float& v : acc) v /= static_cast<float>(rows);
  }
  for (std::int64_t c = 0; c < cols; c += kRowBlock) store_f32(out, c, 1, std::min(kRowBlock, cols - c), acc.data() + c);
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

}  // namespace mantissa::detail
