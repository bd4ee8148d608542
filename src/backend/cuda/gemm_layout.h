// How one product's strided views are handed to cuBLASLt without copying them: which operand is read
// transposed (cuBLASLt's op flag), with which leading dimension and batch stride, and whether a batch of
// products over one shared weight is one product with M = batch x rows. Plain C++ (no CUDA types), so
// every layout the ops produce is checked on every machine (tests/unit/gemm_layout_test.cpp), GPU or not:
// a copy the layout could have avoided is GPU time and memory that nothing else shows on a CPU.
//
// mantissa's Matmul is out[b] = a[b] . w[b] with a [B, M, K], w [B, K, N], out [B, M, N], row-major
// views with any strides. cuBLASLt is column-major, so it computes out^T = w^T . a^T: its A is w (op(A)
// is N x K), its B is a (op(B) is K x M), its D is out (N x M, column-major with ld = out's row stride).
// A row-major [R, C] view with strides (r, c) is, column-major, either a C x R matrix with ld = r (when
// c = 1: not transposed) or an R x C matrix with ld = c, read transposed (when r = 1).
#pragma once

#include <algorithm>
#include <cstdint>

#include "mantissa/core/tensor.h"

namespace mantissa::detail::cuda {

// One operand as cuBLASLt's matrix layout takes it: the stored column-major matrix (rows x cols, ld)
// and whether the product reads it transposed.
struct GemmOperand {
  bool transposed = false;
  std::int64_t rows = 0, cols = 0, ld = 1;
  std::int64_t batch_stride = 0;  // in elements; 0 repeats one matrix for every batch
};

// The call: batch products of N x M = op(w) (N x K) . op(a) (K x M). `copy_*` says an operand's view
// has no such layout (both inner strides past 1, overlapping rows, an output read transposed): the
// caller copies it to a contiguous tensor and plans again. `flattened` says the batch was folded into M.
struct GemmLayout {
  bool copy_a = false, copy_w = false, copy_out = false;
  bool flattened = false;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  GemmOperand w, a, d;  // cuBLASLt's A, B and D
  bool copies() const { return copy_a || copy_w || copy_out; }
};

namespace gemm_detail {

// The row-major [rows, cols] view with strides (row, col) as op(X) = X^T (cols x rows), column-major;
// false where neither layout reads it (both strides past 1, or rows that overlap).
inline bool as_column_major(std::int64_t rows, std::int64_t cols, std::int64_t row, std::int64_t col, GemmOperand& o) {
  const std::int64_t r = std::max<std::int64_t>(rows, 1), c = std::max<std::int64_t>(cols, 1);
  // A dimension of size 1 is stepped through never: its stride says nothing, any valid ld will do.
  if ((cols == 1 || col == 1) && (rows == 1 || row >= c)) {
    o.transposed = false;
    o.rows = c;
    o.cols = r;
    o.ld = rows == 1 ? c : row;
    return true;
  }
  if ((rows == 1 || row == 1) && (cols == 1 || col >= r)) {
    o.transposed = true;
    o.rows = r;
    o.cols = c;
    o.ld = cols == 1 ? r : col;
    return true;
  }
  return false;
}

// Whether a [B, R, C] view's batch steps over its rows exactly (b * R + r then indexes one row stride),
// so that the batch folds into the rows; the folded row stride in `row`.
inline bool rows_fold(const Tensor& t, std::int64_t& row) {
  const std::int64_t r = t.size(1);
  row = r == 1 ? t.strides()[0] : t.strides()[1];
  return r == 1 || t.strides()[0] == r * t.strides()[1];
}

}  // namespace gemm_detail

// The layout of out[b] = a[b] . w[b] (shapes as above; the caller has checked them).
inline GemmLayout plan_gemm(const Tensor& a, const Tensor& w, const Tensor& out) {
  using gemm_detail::as_column_major;
  GemmLayout p;
  p.batch = out.size(0);
  p.m = out.size(1);
  p.n = out.size(2);
  p.k = a.size(2);
  std::int64_t a_row = a.strides()[1], out_row = out.strides()[1];
  // One weight for every batch (a linear layer's [B, T, C] input): one product of M = B * T rows where
  // the input's and the output's batches step over their rows, and the folded rows have a layout.
  std::int64_t a_folded = 0, out_folded = 0;
  GemmOperand probe;
  if (p.batch > 1 && w.strides()[0] == 0 && gemm_detail::rows_fold(a, a_folded) && gemm_detail::rows_fold(out, out_folded) &&
      as_column_major(p.batch * p.m, p.k, a_folded, a.strides()[2], probe) &&
      as_column_major(p.batch * p.m, p.n, out_folded, out.strides()[2], probe) && !probe.transposed) {
    p.flattened = true;
    p.m *= p.batch;
    p.batch = 1;
    a_row = a_folded;
    out_row = out_folded;
  }
  // w [K, N] gives op(A) = w^T; a [M, K] gives op(B) = a^T; out [M, N] is D = out^T, never transposed.
  p.copy_w = !as_column_major(p.k, p.n, w.strides()[1], w.strides()[2], p.w);
  p.copy_a = !as_column_major(p.m, p.k, a_row, a.strides()[2], p.a);
  p.copy_out = !as_column_major(p.m, p.n, out_row, out.strides()[2], p.d) || p.d.transposed;
  if (p.batch > 1) {
    p.w.batch_stride = w.strides()[0];
    p.a.batch_stride = a.strides()[0];
    p.d.batch_stride = out.strides()[0];
    // The output's batches must not overlap (a stride of 0 would be a race, not a sum).
    if (out.strides()[0] < (p.d.cols - 1) * p.d.ld + p.d.rows) p.copy_out = true;
  }
  return p;
}

}  // namespace mantissa::detail::cuda
