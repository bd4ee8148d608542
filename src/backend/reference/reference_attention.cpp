// Reference attention softmax (scaled, optionally causal) and its backward: double loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {

// Element (b, i, j) of a [B, T, S] tensor, by its strides.
std::int64_t at3(const Tensor& t, std::int64_t b, std::int64_t i, std::int64_t j) {
  return b * t.strides()[0] + i * t.strides()[1] + j * t.strides()[2];
}

// How many leading columns row i of a [T, S] attention matrix sees.
std::int64_t visible(bool causal, std::int64_t i, std::int64_t t, std::int64_t s) {
  return causal ? std::clamp<std::int64_t>(i + s - t + 1, 0, s) : s;
}

}  // namespace

void reference_attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs) {
  const std::int64_t nb = scores.size(0), t = scores.size(1), s = scores.size(2);
  for (std::int64_t b = 0; b < nb; ++b) {
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t n = visible(causal, i, t, s);
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, scale * load_element(scores.dtype(), scores.data(), at3(scores, b, i, j)));
      double total = 0;
      for (std::int64_t j = 0; j < n; ++j) total += std::exp(scale * load_element(scores.dtype(), scores.data(), at3(scores, b, i, j)) - mx);
      for (std::int64_t j = 0; j < s; ++j) {
        const double p = j < n ? std::exp(scale * load_element(scores.dtype(), scores.data(), at3(scores, b, i, j)) - mx) / total
                               : n == 0 ? std::numeric_limits<double>::quiet_NaN() : 0.0;
        store_element(probs.dtype(), probs.data(), at3(probs, b, i, j), p);
      }
    }
  }
}

void reference_attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                          const Tensor& grad_scores) {
  const std::int64_t nb = probs.size(0), t = probs.size(1), s = probs.size(2);
  const auto get = [](const Tensor& x, std::int64_t b, std::int64_t i, std::int64_t j) {
    return load_element(x.dtype(), x.data(), at3(x, b, i, j));
  };
  for (std::int64_t b = 0; b < nb; ++b) {
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t n = visible(causal, i, t, s);
      double dot = 0;
      for (std::int64_t j = 0; j < n; ++j) dot += get(probs, b, i, j) * get(grad_probs, b, i, j);
      for (std::int64_t j = 0; j < s; ++j) {
        const double g = j < n ? scale * get(probs, b, i, j) * (get(grad_probs, b, i, j) - dot) : 0.0;
        store_element(grad_scores.dtype(), grad_scores.data(), at3(grad_scores, b, i, j), g);
      }
    }
  }
}

}  // namespace mantissa::detail
