// Reference kernels for layer norm and embedding: double loops, the oracle for the CPU backend.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../core/element_io.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {
double at(const Tensor& t, std::int64_t r, std::int64_t c) {
  return load_element(t.dtype(), t.data(), r * t.strides()[0] + c * t.strides()[1]);
}
double at1(const Tensor& t, std::int64_t i) { return load_element(t.dtype(), t.data(), i * t.strides()[0]); }
void put(const Tensor& t, std::int64_t r, std::int64_t c, double v) {
  store_element(t.dtype(), t.data(), r * t.strides()[0] + c * t.strides()[1], v);
}
void put1(const Tensor& t, std::int64_t i, double v) { store_element(t.dtype(), t.data(), i * t.strides()[0], v); }
}  // namespace

void reference_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    double mu = 0;
    for (std::int64_t c = 0; c < cols; ++c) mu += at(x, r, c);
    mu /= static_cast<double>(cols);
    double var = 0;
    for (std::int64_t c = 0; c < cols; ++c) var += (at(x, r, c) - mu) * (at(x, r, c) - mu);
    var /= static_cast<double>(cols);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (std::int64_t c = 0; c < cols; ++c) put(y, r, c, (at(x, r, c) - mu) * rs * at1(gamma, c) + at1(beta, c));
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

void reference_embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::int64_t d = 0; d < weight.size(1); ++d) {
      put(out, static_cast<std::int64_t>(i), d, at(weight, ids[i], d));
    }
  }
}

void reference_embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::int64_t d = 0; d < grad_weight.size(1); ++d) {
      put(grad_weight, ids[i], d, at(grad_weight, ids[i], d) + at(grad_out, static_cast<std::int64_t>(i), d));
    }
  }
}

}  // namespace mantissa::detail
