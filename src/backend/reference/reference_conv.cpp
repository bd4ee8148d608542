// Reference kernels for convolution, pooling and batch norm: direct loops in double over contiguous
// NCHW tensors, written from the definitions.
#include <cmath>
#include <limits>
#include <vector>

#include "../../core/element_io.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {

// Element (a, b, c, d) of a contiguous 4-D tensor.
struct View4 {
  const Tensor& t;
  std::int64_t d1, d2, d3;
  explicit View4(const Tensor& x) : t(x), d1(x.size(1)), d2(x.size(2)), d3(x.size(3)) {}
  std::int64_t index(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return ((a * d1 + b) * d2 + c) * d3 + d;
  }
  double get(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return load_element(t.dtype(), t.data(), index(a, b, c, d));
  }
  void set(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, double v) const {
    store_element(t.dtype(), t.data(), index(a, b, c, d), v);
  }
};

// Calls fn(n, o, oh, ow, c, kh, kw, ih, iw) for every in-bounds term of the convolution sum.
template <class Fn>
void for_each_term(const Shape& xs, const Shape& ws, const Shape& os, const Conv2dParams& p, Fn&& fn) {
  const std::int64_t o_per_group = ws[0] / p.groups;
  const std::int64_t c_per_group = ws[1];
  for (std::int64_t n = 0; n < os[0]; ++n) {
    for (std::int64_t o = 0; o < os[1]; ++o) {
      const std::int64_t g = o / o_per_group;
      for (std::int64_t oh = 0; oh < os[2]; ++oh) {
        for (std::int64_t ow = 0; ow < os[3]; ++ow) {
          for (std::int64_t c = 0; c < c_per_group; ++c) {
            for (std::int64_t kh = 0; kh < ws[2]; ++kh) {
              const std::int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
              if (ih < 0 || ih >= xs[2]) continue;
              for (std::int64_t kw = 0; kw < ws[3]; ++kw) {
                const std::int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (iw < 0 || iw >= xs[3]) continue;
                fn(n, o, oh, ow, g * c_per_group + c, c, kh, kw, ih, iw);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

void reference_conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) {
  const View4 X(x), W(w), O(out);
  std::vector<double> acc(static_cast<std::size_t>(out.numel()), 0.0);
  for_each_term(x.shape(), w.shape(), out.shape(), p,
                [&](auto n, auto o, auto oh, auto ow, auto ci, auto c, auto kh, auto kw, auto ih, auto iw) {
                  acc[static_cast<std::size_t>(O.index(n, o, oh, ow))] += X.get(n, ci, ih, iw) * W.get(o, c, kh, kw);
                });
  for (std::int64_t i = 0; i < out.numel(); ++i) store_element(out.dtype(), out.data(), i, acc[static_cast<std::size_t>(i)]);
}

void reference_conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) {
  const View4 G(grad_out), W(w), X(grad_x);
  std::vector<double> acc(static_cast<std::size_t>(grad_x.numel()), 0.0);
  for_each_term(grad_x.shape(), w.shape(), grad_out.shape(), p,
                [&](auto n, auto o, auto oh, auto ow, auto ci, auto c, auto kh, auto kw, auto ih, auto iw) {
                  acc[static_cast<std::size_t>(X.index(n, ci, ih, iw))] += G.get(n, o, oh, ow) * W.get(o, c, kh, kw);
                });
  for (std::int64_t i = 0; i < grad_x.numel(); ++i) store_element(grad_x.dtype(), grad_x.data(), i, acc[static_cast<std::size_t>(i)]);
}

void reference_conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w) {
  const View4 X(x), G(grad_out), W(grad_w);
  std::vector<double> acc(static_cast<std::size_t>(grad_w.numel()), 0.0);
  for_each_term(x.shape(), grad_w.shape(), grad_out.shape(), p,
                [&](auto n, auto o, auto oh, auto ow, auto ci, auto c, auto kh, auto kw, auto ih, auto iw) {
                  acc[static_cast<std::size_t>(W.index(o, c, kh, kw))] += X.get(n, ci, ih, iw) * G.get(n, o, oh, ow);
                });
  for (std::int64_t i = 0; i < grad_w.numel(); ++i) store_element(grad_w.dtype(), grad_w.data(), i, acc[static_cast<std::size_t>(i)]);
}

void reference_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor* grad_out,
                      const Tensor* grad_x) {
  const View4 X(x), O(out.defined() ? out : *grad_out);
  std::vector<double> gx(grad_x ? static_cast<std::size_t>(grad_x->numel()) : 0, 0.0);
  const Shape& os = (out.defined() ? out : *grad_out).shape();
  for (std::int64_t n = 0; n < os[0]; ++n) {
    for (std::int64_t c = 0; c < os[1]; ++c) {
      for (std::int64_t oh = 0; oh < os[2]; ++oh) {
        for (std::int64_t ow = 0; ow < os[3]; ++ow) {
          double best = -std::numeric_limits<double>::infinity();
          std::int64_t best_at = -1;
          double total = 0;
          for (std::int64_t kh = 0; kh < p.kernel_h; ++kh) {
            for (std::int64_t kw = 0; kw < p.kernel_w; ++kw) {
              const std::int64_t ih = oh * p.stride_h - p.pad_h + kh;
              const std::int64_t iw = ow * p.stride_w - p.pad_w + kw;
              if (ih < 0 || ih >= x.size(2) || iw < 0 || iw >= x.size(3)) continue;
              const double v = X.get(n, c, ih, iw);
              total += v;
              // A NaN wins (the first one), else the first maximum.
              if (best_at < 0 || (best == best && (v > best || v != v))) {
                best = v;
                best_at = X.index(n, c, ih, iw);
              }
              if (grad_x && !p.max) {
                gx[static_cast<std::size_t>(X.index(n, c, ih, iw))] +=
                    O.get(n, c, oh, ow) / static_cast<double>(p.kernel_h * p.kernel_w);
              }
            }
          }
          if (grad_x) {
            if (p.max && best_at >= 0) gx[static_cast<std::size_t>(best_at)] += O.get(n, c, oh, ow);
          } else {
            O.set(n, c, oh, ow, p.max ? best : total / static_cast<double>(p.kernel_h * p.kernel_w));
          }
        }
      }
    }
  }
  if (grad_x) {
    for (std::int64_t i = 0; i < grad_x->numel(); ++i) store_element(grad_x->dtype(), grad_x->data(), i, gx[static_cast<std::size_t>(i)]);
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
