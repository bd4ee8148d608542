// The attention softmax on the CPU: scale, causal mask, softmax and the rounding into the probabilities'
// dtype in one pass over each row of f32 scores (and the matching backward), rows split across
// threads. Without it attention made five passes over [B, H, T, S] and kept two f32 copies for backward.
// The rows are attention_rows.h's: f32 and bf16 probabilities (and gradients) are written and read
// where they are; other dtypes go through an f32 row and the bulk conversion.
#include <algorithm>
#include <vector>

#include "../reference/reference_kernels.h"
#include "attention_rows.h"
#include "cpu_kernels.h"
#include "mantissa/numeric/bulk.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

// How many leading columns row i of a [t, s] attention matrix sees.
std::int64_t visible(bool causal, std::int64_t i, std::int64_t t, std::int64_t s) {
  return causal ? std::clamp<std::int64_t>(i + s - t + 1, 0, s) : s;
}

bool rows_contiguous(const Tensor& t) { return t.strides()[2] == 1 && t.strides()[0] == t.size(1) * t.strides()[1]; }

// Row r of a rows_contiguous [B, T, S] tensor, as the element type a row function reads or writes.
template <class T>
T* row_of(const Tensor& t, std::int64_t r) {
  return static_cast<T*>(t.data()) + r * t.strides()[1];
}

}  // namespace

void cpu_attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs) {
  const std::int64_t t = scores.size(1), s = scores.size(2);
  if (scores.dtype() != DType::f32 || !rows_contiguous(scores) || !rows_contiguous(probs)) {
    return reference_attention_softmax(scores, scale, causal, probs);
  }
  const std::int64_t rows = scores.size(0) * t;
  const auto f = static_cast<float>(scale);
  const bool avx512 = active_isa() >= Isa::avx512;
#pragma omp parallel if (rows * s >= (1 << 15))
  {
    std::vector<float> work(static_cast<std::size_t>(s)), out(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t n = visible(causal, r % t, t, s);
      const float* row = row_of<const float>(scores, r);
      const auto softmax = [&](auto* p) {
        avx512 ? attention_softmax_row_avx512(row, work.data(), p, n, s, f) : attention_softmax_row(row, work.data(), p, n, s, f);
      };
      if (probs.dtype() == DType::bf16) {
        softmax(row_of<std::uint16_t>(probs, r));
      } else if (probs.dtype() == DType::f32) {
        softmax(row_of<float>(probs, r));
      } else {  // rounded from an f32 row
        softmax(out.data());
        store_f32(probs, r * probs.strides()[1], 1, s, out.data());
      }
    }
  }
}

void cpu_attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                    const Tensor& grad_scores) {
  const std::int64_t t = probs.size(1), s = probs.size(2);
  if (grad_probs.dtype() != DType::f32 || !rows_contiguous(probs) || !rows_contiguous(grad_probs) ||
      !rows_contiguous(grad_scores)) {
    return reference_attention_softmax_backward(probs, grad_probs, scale, causal, grad_scores);
  }
  const std::int64_t rows = probs.size(0) * probs.size(1);
  const auto f = static_cast<float>(scale);
  const bool avx512 = active_isa() >= Isa::avx512;
  const auto run = [&](const auto* p, const float* dp, auto* g, std::int64_t n) {
    avx512 ? attention_softmax_backward_row_avx512(p, dp, g, n, s, f) : attention_softmax_backward_row(p, dp, g, n, s, f);
  };
#pragma omp parallel if (rows * s >= (1 << 15))
  {
    std::vector<float> p_f32(static_cast<std::size_t>(s)), g_f32(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t n = visible(causal, r % t, t, s);
      const float* dp = row_of<const float>(grad_probs, r);
      // g written where it is when f32 or bf16, else into g_f32 and rounded after.
      const auto with_g = [&](const auto* p) {
        if (grad_scores.dtype() == DType::bf16) {
          run(p, dp, row_of<std::uint16_t>(grad_scores, r), n);
        } else if (grad_scores.dtype() == DType::f32) {
          run(p, dp, row_of<float>(grad_scores, r), n);
        } else {
          run(p, dp, g_f32.data(), n);
          store_f32(grad_scores, r * grad_scores.strides()[1], 1, s, g_f32.data());
        }
      };
      if (probs.dtype() == DType::bf16) {
        with_g(row_of<const std::uint16_t>(probs, r));
      } else if (probs.dtype() == DType::f32) {
        with_g(row_of<const float>(probs, r));
      } else {
        load_f32(probs, r * probs.strides()[1], 1, n, p_f32.data());
        with_g(static_cast<const float*>(p_f32.data()));
      }
    }
  }
}

}  // namespace mantissa::detail
