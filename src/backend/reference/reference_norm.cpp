// Reference layer norm and batch norm: double loops, written from the definitions.
#include <cmath>
#include <vector>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {

void reference_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  // An f32 input's result is an f32 value (kernels.h): rounded to f32 before a narrower output's rounding.
  const bool via_f32 = x.dtype() == DType::f32 && is_low_precision(y.dtype());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mu = 0;
    for (std::int64_t c = 0; c < cols; ++c) mu += at(x, r, c);
    mu /= static_cast<double>(cols);
    double var = 0;
    for (std::int64_t c = 0; c < cols; ++c) var += (at(x, r, c) - mu) * (at(x, r, c) - mu);
    var /= static_cast<double>(cols);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double v = (at(x, r, c) - mu) * rs * at1(gamma, c) + at1(beta, c);
      put(y, r, c, via_f32 ? static_cast<double>(static_cast<float>(v)) : v);
    }
    put1(mean, r, mu);
    put1(rstd, r, rs);
  }
}

void reference_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                   const Tensor& grad_beta) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  std::vector<double> dg(static_cast<std::size_t>(cols), 0.0);
  std::vector<double> db(static_cast<std::size_t>(cols), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double mu = at1(mean, r);
    const double rs = at1(rstd, r);
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
    double mean_g = 0;
    double mean_gx = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double xhat = (at(x, r, c) - mu) * rs;
      const double g = at(grad_y, r, c) * at1(gamma, c);
      mean_g += g;
      mean_gx += g * xhat;
      dg[static_cast<std::size_t>(c)] += at(grad_y, r, c) * xhat;
      db[static_cast<std::size_t>(c)] += at(grad_y, r, c);
    }
    mean_g /= static_cast<double>(cols);
    mean_gx /= static_cast<double>(cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double xhat = (at(x, r, c) - mu) * rs;
      const double g = at(grad_y, r, c) * at1(gamma, c);
      put(grad_x, r, c, rs * (g - mean_g - xhat * mean_gx));
    }
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    put1(grad_gamma, c, dg[static_cast<std::size_t>(c)]);
    put1(grad_beta, c, db[static_cast<std::size_t>(c)]);
  }
}

void reference_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd) {
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const auto at = [&](std::int64_t i, std::int64_t ch, std::int64_t k) { return (i * c + ch) * s + k; };
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double mu = 0;
    for (std::int64_t i = 0; i < n; ++i) for (std::int64_t k = 0; k < s; ++k) mu += load_element(x.dtype(), x.data(), at(i, ch, k));
    mu /= static_cast<double>(n * s);
    double var = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t k = 0; k < s; ++k) {
        const double d = load_element(x.dtype(), x.data(), at(i, ch, k)) - mu;
        var += d * d;
      }
    }
    const double rs = 1.0 / std::sqrt(var / static_cast<double>(n * s) + eps);
    const double g = load_element(gamma.dtype(), gamma.data(), ch);
    const double b = load_element(beta.dtype(), beta.data(), ch);
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t k = 0; k < s; ++k) {
        const double v = load_element(x.dtype(), x.data(), at(i, ch, k));
        store_element(y.dtype(), y.data(), at(i, ch, k), (v - mu) * rs * g + b);
      }
    }
    store_element(mean.dtype(), mean.data(), ch, mu);
    store_element(rstd.dtype(), rstd.data(), ch, rs);
  }
}

void reference_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                   const Tensor& grad_beta) {
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const auto at = [&](std::int64_t i, std::int64_t ch, std::int64_t k) { return (i * c + ch) * s + k; };
  const double m = static_cast<double>(n * s);
  for (std::int64_t ch = 0; ch < c; ++ch) {
    const double mu = load_element(mean.dtype(), mean.data(), ch);
    const double rs = load_element(rstd.dtype(), rstd.data(), ch);
    const double g = load_element(gamma.dtype(), gamma.data(), ch);
    double sum_dy = 0;
    double sum_dy_xhat = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t k = 0; k < s; ++k) {
        const double dy = load_element(grad_y.dtype(), grad_y.data(), at(i, ch, k));
        sum_dy += dy;
        sum_dy_xhat += dy * (load_element(x.dtype(), x.data(), at(i, ch, k)) - mu) * rs;
      }
    }
    // dx = gamma rstd / m (m dy - sum(dy) - xhat sum(dy xhat))
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t k = 0; k < s; ++k) {
        const double dy = load_element(grad_y.dtype(), grad_y.data(), at(i, ch, k));
        const double xhat = (load_element(x.dtype(), x.data(), at(i, ch, k)) - mu) * rs;
        store_element(grad_x.dtype(), grad_x.data(), at(i, ch, k), g * rs / m * (m * dy - sum_dy - xhat * sum_dy_xhat));
      }
    }
    store_element(grad_gamma.dtype(), grad_gamma.data(), ch, sum_dy_xhat);
    store_element(grad_beta.dtype(), grad_beta.data(), ch, sum_dy);
  }
}

}  // namespace mantissa::detail
