// The attention softmax on the CPU: scale, causal mask, softmax and the rounding into the probabilities'
// dtype in one pass over each row of f32 scores (and the matching backward), rows split across
// threads. Without it attention made five passes over [B, H, T, S] and kept two f32 copies for backward.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../reference/reference_kernels.h"
#include "cpu_kernels.h"
#include "rows.h"
#include "softmax_rows.h"

namespace mantissa::detail {
namespace {

// How many leading columns row i of a [t, s] attention matrix sees.
std::int64_t visible(bool causal, std::int64_t i, std::int64_t t, std::int64_t s) {
  return causal ? std::clamp<std::int64_t>(i + s - t + 1, 0, s) : s;
}

bool rows_contiguous(const Tensor& t) { return t.strides()[2] == 1 && t.strides()[0] == t.size(1) * t.strides()[1]; }

}  // namespace

void cpu_attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs) {
  const std::int64_t t = scores.size(1), s = scores.size(2);
  if (scores.dtype() != DType::f32 || !rows_contiguous(scores) || !rows_contiguous(probs)) {
    return reference_attention_softmax(scores, scale, causal, probs);
  }
  const std::int64_t rows = scores.size(0) * t;
  const auto f = static_cast<float>(scale);
#pragma omp parallel if (rows * s >= (1 << 15))
  {
    std::vector<float> buf(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t n = visible(causal, r % t, t, s);
      softmax_row(scores.data_as<float>() + r * scores.strides()[1], buf.data(), n, s, f);
      store_f32(probs, r * probs.strides()[1], 1, s, buf.data());
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
#pragma omp parallel if (rows * s >= (1 << 15))
  {
    std::vector<float> p(static_cast<std::size_t>(s)), g(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t n = visible(causal, r % t, t, s);
      load_f32(probs, r * probs.strides()[1], 1, n, p.data());
      softmax_backward_row(p.data(), grad_probs.data_as<float>() + r * grad_probs.strides()[1], g.data(), n, s, f);
      store_f32(grad_scores, r * grad_scores.strides()[1], 1, s, g.data());
    }
  }
}

}  // namespace mantissa::detail
