// The reference backend: plain, obviously correct loops in double over any dtype and any strides. It is
// the oracle the fast backends are tested against, not a backend to train with. Values are read
// exactly, computed in double, and rounded once to the output dtype. This file has the kernels of the
// elementwise, reduction, matmul, softmax, loss-scaling and optimizer families, and registers every
// reference kernel (the others are in reference_<family>.cpp).
#include <cmath>
#include <limits>
#include <vector>

#include "../../core/element_io.h"
#include "../../core/strided.h"
#include "../read_later.h"
#include "../registry.h"
#include "reference_math.h"
#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {

// Strides of `out` (keepdim shape) seen from x's iteration space: reduced axes step nowhere.
Shape reduced_strides(const Tensor& out, std::span<const int> axes) {
  Shape st = contiguous_strides(out.shape());
  for (int a : axes) st[static_cast<std::size_t>(a)] = 0;
  return st;
}

void copy_kernel(const Tensor& src, const Tensor& dst) {
  for_each_offset(src.shape(), {src.strides(), dst.strides()}, [&](const std::int64_t* o) {
    store_element(dst.dtype(), dst.data(), o[1], load_element(src.dtype(), src.data(), o[0]));
  });
}

void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  for_each_offset(out.shape(), {a.strides(), b.strides(), out.strides()}, [&](const std::int64_t* o) {
    const double x = load_element(a.dtype(), a.data(), o[0]);
    const double y = load_element(b.dtype(), b.data(), o[1]);
    store_element(out.dtype(), out.data(), o[2], reference::binary(op, x, y));
  });
}

void unary_kernel(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) {
  for_each_offset(x.shape(), {x.strides(), out.strides()}, [&](const std::int64_t* o) {
    store_element(out.dtype(), out.data(), o[1], reference::unary(op, load_element(x.dtype(), x.data(), o[0]), alpha));
  });
}

void unary_backward_kernel(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y,
                    const Tensor& grad_x) {
  for_each_offset(x.shape(), {x.strides(), grad_y.strides(), grad_x.strides()}, [&](const std::int64_t* o) {
    const double g = reference::unary_gradient(op, load_element(x.dtype(), x.data(), o[0]),
                                    load_element(grad_y.dtype(), grad_y.data(), o[1]), alpha);
    store_element(grad_x.dtype(), grad_x.data(), o[2], g);
  });
}

void reduce_kernel(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out) {
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

// The product is FP8's scaled product with a scale of 1 (reference_fp8.cpp).
void matmul_kernel(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) {
  reference_scaled_matmul(a, w, 1.0, bias, out);
}

void matmul_row_sums_kernel(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& sums) {
  reference_scaled_matmul(a, w, 1.0, Tensor(), out);
  for (std::int64_t i = 0; i < a.size(1); ++i) {
    double s = 0;
    for (std::int64_t p = 0; p < a.size(2); ++p) {
      s += load_element(a.dtype(), a.data(), i * a.strides()[1] + p * a.strides()[2]);
    }
    store_element(sums.dtype(), sums.data(), i * sums.strides()[0], s);
  }
}

// The sums in double, the bias added; pre their rounding, out the GELU of the sum itself, rounded.
void matmul_gelu_kernel(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& pre, const Tensor& out) {
  const Shape &sp = pre.strides(), &so = out.strides();
  for (std::int64_t i = 0; i < pre.size(1); ++i) {
    for (std::int64_t j = 0; j < pre.size(2); ++j) {
      double s = product_at(a, w, 0, i, j);
      if (bias.defined()) s += load_element(bias.dtype(), bias.data(), j * bias.strides()[0]);
      store_element(pre.dtype(), pre.data(), i * sp[1] + j * sp[2], s);
      store_element(out.dtype(), out.data(), i * so[1] + j * so[2], reference::unary(UnaryOp::gelu_tanh, s, 0));
    }
  }
}

void matmul_gelu_backward_kernel(const Tensor& a, const Tensor& w, const Tensor& pre, const Tensor& out) {
  const Shape &sp = pre.strides(), &so = out.strides();
  for (std::int64_t i = 0; i < out.size(1); ++i) {
    for (std::int64_t j = 0; j < out.size(2); ++j) {
      const double x = load_element(pre.dtype(), pre.data(), i * sp[1] + j * sp[2]);
      store_element(out.dtype(), out.data(), i * so[1] + j * so[2],
                    reference::unary_gradient(UnaryOp::gelu_tanh, x, product_at(a, w, 0, i, j), 0));
    }
  }
}

void matmul_accumulate_kernel(const Tensor& a, const Tensor& w, const Tensor& out) {
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2);
  const Shape& so = out.strides();
  const bool f64 = a.dtype() == DType::f64 || w.dtype() == DType::f64 || out.dtype() == DType::f64;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = product_at(a, w, b, i, j);
        // The product is an f32 value before it is added (f32 accumulation: a sum past f32's range is
        // infinite there, as on every fast backend), unless the computation is in f64.
        if (!f64) s = static_cast<double>(static_cast<float>(s));
        const std::int64_t o = b * so[0] + i * so[1] + j * so[2];
        store_element(out.dtype(), out.data(), o, load_element(out.dtype(), out.data(), o) + s);
      }
    }
  }
}

void softmax_kernel(const Tensor& x, const Tensor& y, bool log) {
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

void softmax_backward_kernel(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) {
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

void attention_softmax_kernel(const Tensor& scores, double scale, bool causal, const Tensor& probs) {
  reference_attention_softmax(scores, scale, causal, probs);
}
void attention_softmax_backward_kernel(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                const Tensor& grad_scores) {
  reference_attention_softmax_backward(probs, grad_probs, scale, causal, grad_scores);
}

GradientCheck scale_and_check_one(const Tensor& g, double factor, double underflow_below) {
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

GradientCheck scale_and_check_kernel(std::span<const Tensor> gradients, double factor, double underflow_below,
                                     const Tensor& totals) {
  if (!gradients.empty()) check_place<CheckTotals>("scale_and_check", totals, gradients.front().device());
  GradientCheck total;
  for (const Tensor& g : gradients) total += scale_and_check_one(g, factor, underflow_below);
  return leave_check(total, totals);
}

// torch.optim.SGD, as its documentation writes it: g = grad + wd p; with momentum, b = g at the first
// step, else mu b + g, and g = g + mu b (Nesterov) or b; p = p - lr g. In double.
void sgd_update_one(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s, bool first) {
  for (std::int64_t i = 0; i < param.numel(); ++i) {
    const double p = load_element(param.dtype(), param.data(), i);
    double g = load_element(grad.dtype(), grad.data(), i) * s.grad_scale + s.weight_decay * p;
    if (s.momentum != 0) {
      const double b_old = load_element(momentum_buffer.dtype(), momentum_buffer.data(), i);
      const double b = first ? g : s.momentum * b_old + g;
      store_element(momentum_buffer.dtype(), momentum_buffer.data(), i, b);
      g = s.nesterov ? g + s.momentum * b : b;
    }
    store_element(param.dtype(), param.data(), i, p - s.lr * g);
  }
}

// torch.optim.Adam / AdamW, as their documentation writes them: AdamW decays p by lr wd first, Adam adds
// wd p to the gradient; m and v are the moving averages of g and g^2; p = p - lr m_hat / (sqrt(v_hat) +
// eps) with m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t). In double.
void adam_update_one(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamStep& s) {
  const auto t = static_cast<double>(s.step);
  for (std::int64_t i = 0; i < param.numel(); ++i) {
    double p = load_element(param.dtype(), param.data(), i);
    double g = load_element(grad.dtype(), grad.data(), i) * s.grad_scale;
    if (s.decoupled) {
      p -= s.lr * s.weight_decay * p;
    } else {
      g += s.weight_decay * p;
    }
    const double mi = s.beta1 * load_element(m.dtype(), m.data(), i) + (1 - s.beta1) * g;
    const double vi = s.beta2 * load_element(v.dtype(), v.data(), i) + (1 - s.beta2) * g * g;
    const double m_hat = mi / (1 - std::pow(s.beta1, t));
    const double v_hat = vi / (1 - std::pow(s.beta2, t));
    store_element(param.dtype(), param.data(), i, p - s.lr * m_hat / (std::sqrt(v_hat) + s.eps));
    store_element(m.dtype(), m.data(), i, mi);
    store_element(v.dtype(), v.data(), i, vi);
  }
}

void round_into_kernel(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed) {
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

// The lists, a parameter at a time: each updated, then written back into its low-precision parameter.
void sgd_update_kernel(std::span<const ParamUpdate> list, const SgdStep& s, const WriteBack& w) {
  for (const ParamUpdate& u : list) {
    sgd_update_one(u.param, u.grad, u.state[0], s, u.first);
    if (u.low.defined()) round_into_kernel(u.param, u.low, w.rounding, w.seed);
  }
}

void adam_update_kernel(std::span<const ParamUpdate> list, const AdamStep& s, const WriteBack& w) {
  for (const ParamUpdate& u : list) {
    adam_update_one(u.param, u.grad, u.state[0], u.state[1], s);
    if (u.low.defined()) round_into_kernel(u.param, u.low, w.rounding, w.seed);
  }
}

void layer_norm_kernel(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd) {
  reference_layer_norm(x, gamma, beta, eps, y, mean, rstd);
}
void layer_norm_backward_kernel(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                         const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                         const Tensor& grad_beta, double /*eps*/) {
  reference_layer_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
}
void cross_entropy_kernel(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                   double smoothing, const Tensor& losses) {
  reference_cross_entropy(logits, targets, ignore_index, smoothing, losses);
}
void cross_entropy_backward_kernel(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                            double smoothing, const Tensor& grad_losses, const Tensor& grad_logits, const Tensor& losses) {
  reference_cross_entropy_backward(logits, targets, ignore_index, smoothing, grad_losses, grad_logits, losses);
}
void embedding_kernel(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) {
  reference_embedding(weight, ids, out);
}
void embedding_backward_kernel(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) {
  reference_embedding_backward(ids, grad_out, grad_weight);
}
void conv2d_kernel(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) {
  reference_conv2d(x, w, p, out);
}
void conv2d_backward_data_kernel(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) {
  reference_conv2d_backward_data(grad_out, w, p, grad_x);
}
void conv2d_backward_weights_kernel(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p,
                             const Tensor& grad_w) {
  reference_conv2d_backward_weights(x, grad_out, p, grad_w);
}
void pool2d_kernel(const Tensor& x, const Pool2dParams& p, const Tensor& out) {
  reference_pool2d(x, p, out, nullptr, nullptr);
}
void pool2d_backward_kernel(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x) {
  reference_pool2d(x, p, Tensor(), &grad_out, &grad_x);
}
void batch_norm_kernel(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd) {
  reference_batch_norm(x, gamma, beta, eps, y, mean, rstd);
}
void batch_norm_backward_kernel(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                         const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                         const Tensor& grad_beta) {
  reference_batch_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
}

}  // namespace

GradientCheck reference_scale_and_check(const Tensor& g, double factor, double underflow_below) {
  return scale_and_check_one(g, factor, underflow_below);
}

void register_reference_kernels() {
  register_kernel<kernel::Copy>(Impl::reference, copy_kernel);
  register_kernel<kernel::Binary>(Impl::reference, binary_kernel);
  register_kernel<kernel::Unary>(Impl::reference, unary_kernel);
  register_kernel<kernel::UnaryBackward>(Impl::reference, unary_backward_kernel);
  register_kernel<kernel::Reduce>(Impl::reference, reduce_kernel);
  register_kernel<kernel::Matmul>(Impl::reference, matmul_kernel);
  register_kernel<kernel::MatmulAccumulate>(Impl::reference, matmul_accumulate_kernel);
  register_kernel<kernel::MatmulRowSums>(Impl::reference, matmul_row_sums_kernel);
  register_kernel<kernel::MatmulGelu>(Impl::reference, matmul_gelu_kernel);
  register_kernel<kernel::MatmulGeluBackward>(Impl::reference, matmul_gelu_backward_kernel);
  register_kernel<kernel::Softmax>(Impl::reference, softmax_kernel);
  register_kernel<kernel::SoftmaxBackward>(Impl::reference, softmax_backward_kernel);
  register_kernel<kernel::AttentionSoftmax>(Impl::reference, attention_softmax_kernel);
  register_kernel<kernel::AttentionSoftmaxBackward>(Impl::reference, attention_softmax_backward_kernel);
  register_kernel<kernel::ScaleAndCheck>(Impl::reference, scale_and_check_kernel);
  register_kernel<kernel::Numerics>(Impl::reference, reference_numerics);
  register_kernel<kernel::SgdUpdate>(Impl::reference, sgd_update_kernel);
  register_kernel<kernel::AdamUpdate>(Impl::reference, adam_update_kernel);
  register_kernel<kernel::RoundInto>(Impl::reference, round_into_kernel);
  register_kernel<kernel::LayerNorm>(Impl::reference, layer_norm_kernel);
  register_kernel<kernel::AddLayerNorm>(Impl::reference, kernel::add_then_layer_norm<binary_kernel, layer_norm_kernel>);
  register_kernel<kernel::LayerNormBackward>(Impl::reference, layer_norm_backward_kernel);
  register_kernel<kernel::CrossEntropy>(Impl::reference, cross_entropy_kernel);
  register_kernel<kernel::LstmCell>(Impl::reference, reference_lstm_cell);
  register_kernel<kernel::LstmCellBackward>(Impl::reference, reference_lstm_cell_backward);
  register_kernel<kernel::CrossEntropyBackward>(Impl::reference, cross_entropy_backward_kernel);
  register_kernel<kernel::Embedding>(Impl::reference, embedding_kernel);
  register_kernel<kernel::EmbeddingBackward>(Impl::reference, embedding_backward_kernel);
  register_kernel<kernel::Conv2d>(Impl::reference, conv2d_kernel);
  register_kernel<kernel::Conv2dBackwardData>(Impl::reference, conv2d_backward_data_kernel);
  register_kernel<kernel::Conv2dBackwardWeights>(Impl::reference, conv2d_backward_weights_kernel);
  register_kernel<kernel::Pool2d>(Impl::reference, pool2d_kernel);
  register_kernel<kernel::Pool2dBackward>(Impl::reference, pool2d_backward_kernel);
  register_kernel<kernel::BatchNorm>(Impl::reference, batch_norm_kernel);
  register_kernel<kernel::BatchNormBackward>(Impl::reference, batch_norm_backward_kernel);
  register_kernel<kernel::Fp8Amax>(Impl::reference, reference_fp8_amax);
  register_kernel<kernel::Fp8Quantize>(Impl::reference, reference_fp8_quantize);
  register_kernel<kernel::BlockQuantize>(Impl::reference, reference_block_quantize);
  register_kernel<kernel::HadamardRows>(Impl::reference, reference_hadamard_rows);
  register_kernel<kernel::Fp8QuantizeCurrent>(Impl::reference, reference_fp8_quantize_current);
  register_kernel<kernel::ScaledMatmul>(Impl::reference, reference_scaled_matmul);
}

}  // namespace mantissa::detail
