// The reference backend: plain, obviously correct loops in double over any dtype and any strides. It is
// the oracle the fast backends are tested against, not a backend to train with. Values are read
// exactly, computed in double, and rounded once to the output dtype.
#include <cmath>
#include <limits>
#include <vector>

#include "../../core/element_io.h"
#include "../../core/strided.h"
#include "../backend.h"
#include "../optimizer_math.h"
#include "../unary_math.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {

// Strides of `out` (keepdim shape) seen from x's iteration space: reduced axes step nowhere.
Shape reduced_strides(const Tensor& out, std::span<const int> axes) {
  Shape st = contiguous_strides(out.shape());
  for (int a : axes) st[static_cast<std::size_t>(a)] = 0;
  return st;
}

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }

  void copy(const Tensor& src, const Tensor& dst) override {
    for_each_offset(src.shape(), {src.strides(), dst.strides()}, [&](const std::int64_t* o) {
      store_element(dst.dtype(), dst.data(), o[1], load_element(src.dtype(), src.data(), o[0]));
    });
  }

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    for_each_offset(out.shape(), {a.strides(), b.strides(), out.strides()}, [&](const std::int64_t* o) {
      const double x = load_element(a.dtype(), a.data(), o[0]);
      const double y = load_element(b.dtype(), b.data(), o[1]);
      store_element(out.dtype(), out.data(), o[2], binary_value(op, x, y));
    });
  }

  void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) override {
    for_each_offset(x.shape(), {x.strides(), out.strides()}, [&](const std::int64_t* o) {
      store_element(out.dtype(), out.data(), o[1], unary_value(op, load_element(x.dtype(), x.data(), o[0]), alpha));
    });
  }

  void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y,
                      const Tensor& grad_x) override {
    for_each_offset(x.shape(), {x.strides(), grad_y.strides(), grad_x.strides()}, [&](const std::int64_t* o) {
      const double g = unary_gradient(op, load_element(x.dtype(), x.data(), o[0]),
                                      load_element(grad_y.dtype(), grad_y.data(), o[1]), alpha);
      store_element(grad_x.dtype(), grad_x.data(), o[2], g);
    });
  }

  void reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out) override {
    const double init = op == ReduceOp::max ? -std::numeric_limits<double>::infinity() : 0.0;
    std::vector<double> acc(static_cast<std::size_t>(out.numel()), init);
    for_each_offset(x.shape(), {x.strides(), reduced_strides(out, axes)}, [&](const std::int64_t* o) {
      const double v = load_element(x.dtype(), x.data(), o[0]);
      double& a = acc[static_cast<std::size_t>(o[1])];
      a = op == ReduceOp::max ? (std::isnan(v) || v > a ? v : a) : a + v;
    });
    double count = 1;
    for (int a : axes) count *= static_cast<double>(x.shape()[static_cast<std::size_t>(a)]);
    std::int64_t k = 0;
    for_each_offset(out.shape(), {out.strides()}, [&](const std::int64_t* o) {
      const double a = acc[static_cast<std::size_t>(k++)];
      store_element(out.dtype(), out.data(), o[0], op == ReduceOp::mean ? a / count : a);
    });
  }

  void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) override {
    const std::int64_t batch = out.size(0);
    const std::int64_t m = out.size(1);
    const std::int64_t n = out.size(2);
    const std::int64_t k = a.size(2);
    const Shape& sa = a.strides();
    const Shape& sw = w.strides();
    const Shape& so = out.strides();
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double s = bias.defined() ? load_element(bias.dtype(), bias.data(), j * bias.strides()[0]) : 0.0;
          for (std::int64_t p = 0; p < k; ++p) {
            s += load_element(a.dtype(), a.data(), b * sa[0] + i * sa[1] + p * sa[2]) *
                 load_element(w.dtype(), w.data(), b * sw[0] + p * sw[1] + j * sw[2]);
          }
          store_element(out.dtype(), out.data(), b * so[0] + i * so[1] + j * so[2], s);
        }
      }
    }
  }

  void softmax(const Tensor& x, const Tensor& y, bool log) override {
    const std::int64_t rows = x.size(0);
    const std::int64_t cols = x.size(1);
    std::vector<double> v(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t c = 0; c < cols; ++c) {
        v[static_cast<std::size_t>(c)] = load_element(x.dtype(), x.data(), r * x.strides()[0] + c * x.strides()[1]);
        mx = std::max(mx, v[static_cast<std::size_t>(c)]);
      }
      double total = 0;
      for (double e : v) total += std::exp(e - mx);
      for (std::int64_t c = 0; c < cols; ++c) {
        const double z = v[static_cast<std::size_t>(c)] - mx;
        const double out = log ? z - std::log(total) : std::exp(z) / total;
        store_element(y.dtype(), y.data(), r * y.strides()[0] + c * y.strides()[1], out);
      }
    }
  }

  void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) override {
    const std::int64_t rows = y.size(0);
    const std::int64_t cols = y.size(1);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto at = [&](const Tensor& t, std::int64_t c) {
        return load_element(t.dtype(), t.data(), r * t.strides()[0] + c * t.strides()[1]);
      };
      // softmax: gx = y * (g - sum(g * y)); log-softmax: gx = g - exp(y) * sum(g).
      double dot = 0;
      for (std::int64_t c = 0; c < cols; ++c) dot += log ? at(grad_y, c) : at(grad_y, c) * at(y, c);
      for (std::int64_t c = 0; c < cols; ++c) {
        const double g = at(grad_y, c);
        const double v = log ? g - std::exp(at(y, c)) * dot : at(y, c) * (g - dot);
        store_element(grad_x.dtype(), grad_x.data(), r * grad_x.strides()[0] + c * grad_x.strides()[1], v);
      }
    }
  }

  void attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs) override {
    reference_attention_softmax(scores, scale, causal, probs);
  }
  void attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                  const Tensor& grad_scores) override {
    reference_attention_softmax_backward(probs, grad_probs, scale, causal, grad_scores);
  }

  GradientCheck scale_and_check(const Tensor& g, double factor, double underflow_below) override {
    GradientCheck c;
    for_each_offset(g.shape(), {g.strides()}, [&](const std::int64_t* o) {
      const double v = load_element(g.dtype(), g.data(), o[0]);
      ++c.count;
      if (v != 0 && std::fabs(v) < underflow_below) ++c.underflow;
      store_element(g.dtype(), g.data(), o[0], v * factor);
      const double r = load_element(g.dtype(), g.data(), o[0]);
      if (std::isfinite(r)) {
        c.sum_squares += r * r;
      } else {
        ++c.nonfinite;
      }
    });
    return c;
  }

  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s) override {
    for (std::int64_t i = 0; i < param.numel(); ++i) {
      double buf = momentum_buffer.defined() ? load_element(momentum_buffer.dtype(), momentum_buffer.data(), i) : 0.0;
      const double p = sgd_element(load_element(param.dtype(), param.data(), i),
                                   load_element(grad.dtype(), grad.data(), i), buf, s);
      store_element(param.dtype(), param.data(), i, p);
      if (momentum_buffer.defined()) store_element(momentum_buffer.dtype(), momentum_buffer.data(), i, buf);
    }
  }

  void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const AdamStep& s) override {
    const double bias1 = 1 - std::pow(s.beta1, static_cast<double>(s.step));
    const double bias2_sqrt = std::sqrt(1 - std::pow(s.beta2, static_cast<double>(s.step)));
    for (std::int64_t i = 0; i < param.numel(); ++i) {
      double mi = load_element(m.dtype(), m.data(), i);
      double vi = load_element(v.dtype(), v.data(), i);
      const double p = adam_element(load_element(param.dtype(), param.data(), i),
                                    load_element(grad.dtype(), grad.data(), i), mi, vi, s, bias1, bias2_sqrt);
      store_element(param.dtype(), param.data(), i, p);
      store_element(m.dtype(), m.data(), i, mi);
      store_element(v.dtype(), v.data(), i, vi);
    }
  }

  void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed) override {
    const CastOptions o{rounding, false, seed};
    for (std::int64_t i = 0; i < src.numel(); ++i) {
      const auto x = static_cast<float>(load_element(src.dtype(), src.data(), i));
      if (dst.dtype() == DType::f32 || dst.dtype() == DType::f64) {
        store_element(dst.dtype(), dst.data(), i, x);
        continue;
      }
      const Format f = format_of(dst.dtype());
      const std::uint32_t bits = encode(f, x, o, static_cast<std::uint64_t>(i));
      store_element(dst.dtype(), dst.data(), i, decode(f, bits));
    }
  }

  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override {
    reference_layer_norm(x, gamma, beta, eps, y, mean, rstd);
  }
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                           const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                           const Tensor& grad_beta, double /*eps*/) override {
    reference_layer_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
  }
  void cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                     double smoothing, const Tensor& probs, const Tensor& losses) override {
    reference_cross_entropy(logits, targets, ignore_index, smoothing, probs, losses);
  }
  void cross_entropy_backward(const Tensor& probs, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                              double smoothing, const Tensor& grad_losses, const Tensor& grad_logits) override {
    reference_cross_entropy_backward(probs, targets, ignore_index, smoothing, grad_losses, grad_logits);
  }
  void embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) override {
    reference_embedding(weight, ids, out);
  }
  void embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) override {
    reference_embedding_backward(ids, grad_out, grad_weight);
  }
  void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) override {
    reference_conv2d(x, w, p, out);
  }
  void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) override {
    reference_conv2d_backward_data(grad_out, w, p, grad_x);
  }
  void conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p,
                               const Tensor& grad_w) override {
    reference_conv2d_backward_weights(x, grad_out, p, grad_w);
  }
  void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) override {
    reference_pool2d(x, p, out, nullptr, nullptr);
  }
  void pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x) override {
    reference_pool2d(x, p, Tensor(), &grad_out, &grad_x);
  }
  void batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override {
    reference_batch_norm(x, gamma, beta, eps, y, mean, rstd);
  }
  void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                           const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                           const Tensor& grad_beta) override {
    reference_batch_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
  }
};

}  // namespace

Backend& reference_backend() {
  static ReferenceBackend backend;
  return backend;
}

}  // namespace mantissa::detail
