// Reference cross-entropy (with ignore index and label smoothing): double loops over rows. Both
// directions start from the logits; the backward recomputes the softmax, as the fast kernels do.
#include <cmath>
#include <limits>
#include <vector>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {

// Row r of the logits in double, and its log-sum-exp.
double load_row(const Tensor& logits, std::int64_t r, std::vector<double>& x) {
  const std::int64_t c = logits.size(1);
  x.resize(static_cast<std::size_t>(c));
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < c; ++j) {
    x[static_cast<std::size_t>(j)] = at(logits, r, j);
    mx = std::max(mx, x[static_cast<std::size_t>(j)]);
  }
  double total = 0;
  for (double v : x) total += std::exp(v - mx);
  return mx + std::log(total);
}

// w_j: the target's weight 1 - smoothing plus smoothing / C for every class.
double target_weight(std::int64_t j, std::int64_t t, std::int64_t c, double smoothing) {
  return smoothing / static_cast<double>(c) + (j == t ? 1.0 - smoothing : 0.0);
}

// -sum_j w_j log p_j of row r (0 for an ignored row).
double row_loss(const std::vector<double>& x, double lse, std::int64_t t, std::int64_t ignore_index, double smoothing) {
  if (t == ignore_index) return 0.0;
  const auto c = static_cast<std::int64_t>(x.size());
  double loss = 0;
  for (std::int64_t j = 0; j < c; ++j) loss -= target_weight(j, t, c, smoothing) * (x[static_cast<std::size_t>(j)] - lse);
  return loss;
}

}  // namespace

void reference_cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                             double smoothing, const Tensor& losses) {
  const std::int64_t n = logits.size(0);
  std::vector<double> x;
  for (std::int64_t r = 0; r < n; ++r) {
    const double lse = load_row(logits, r, x);
    put1(losses, r, row_loss(x, lse, targets[static_cast<std::size_t>(r)], ignore_index, smoothing));
  }
}

void reference_cross_entropy_backward(const Tensor& logits, std::span<const std::int64_t> targets,
                                      std::int64_t ignore_index, double smoothing, const Tensor& grad_losses,
                                      const Tensor& grad_logits, const Tensor& losses) {
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  std::vector<double> x;
  for (std::int64_t r = 0; r < n; ++r) {
    const double lse = load_row(logits, r, x);  // the whole row is read before any of it is written
    const std::int64_t t = targets[static_cast<std::size_t>(r)];
    const double g = t == ignore_index ? 0.0 : at1(grad_losses, r);
    if (losses.defined()) put1(losses, r, row_loss(x, lse, t, ignore_index, smoothing));
    for (std::int64_t j = 0; j < c; ++j) {
      // The probability rounded to f32 (unless the logits are f64), as the contract keeps it: a class far
      // below the others has p = 0 exactly, so an infinite upstream gradient gives NaN there (0 * inf)
      // on every backend.
      double p = std::exp(x[static_cast<std::size_t>(j)] - lse);
      if (logits.dtype() != DType::f64) p = static_cast<double>(static_cast<float>(p));
      put(grad_logits, r, j, (p - target_weight(j, t, c, smoothing)) * g);
    }
  }
}

}  // namespace mantissa::detail
