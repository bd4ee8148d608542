// Reference cross-entropy (with ignore index and label smoothing): double loops over rows.
#include <cmath>
#include <limits>
#include <vector>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {

void reference_cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                             double smoothing, const Tensor& probs, const Tensor& losses) {
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  for (std::int64_t r = 0; r < n; ++r) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < c; ++j) mx = std::max(mx, at(logits, r, j));
    double total = 0;
    for (std::int64_t j = 0; j < c; ++j) total += std::exp(at(logits, r, j) - mx);
    const double lse = mx + std::log(total);
    double loss = 0;
    const std::int64_t t = targets[static_cast<std::size_t>(r)];
    for (std::int64_t j = 0; j < c; ++j) {
      const double logp = at(logits, r, j) - lse;
      put(probs, r, j, std::exp(logp));
      const double w = smoothing / static_cast<double>(c) + (j == t ? 1.0 - smoothing : 0.0);
      loss -= w * logp;
    }
    put1(losses, r, t == ignore_index ? 0.0 : loss);
  }
}

void reference_cross_entropy_backward(const Tensor& probs, std::span<const std::int64_t> targets,
                                      std::int64_t ignore_index, double smoothing, const Tensor& grad_losses,
                                      const Tensor& grad_logits) {
  const std::int64_t n = probs.size(0);
  const std::int64_t c = probs.size(1);
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t t = targets[static_cast<std::size_t>(r)];
    const double g = t == ignore_index ? 0.0 : at1(grad_losses, r);
    for (std::int64_t j = 0; j < c; ++j) {
      const double w = smoothing / static_cast<double>(c) + (j == t ? 1.0 - smoothing : 0.0);
      put(grad_logits, r, j, (at(probs, r, j) - w) * g);
    }
  }
}

}  // namespace mantissa::detail
