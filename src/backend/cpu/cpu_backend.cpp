// The CPU backend: oneDNN for matmul and convolution, f32 loops over converted row blocks for the rest
// (see cpu_kernels.h). Each kernel call's time is added to its family in kernel_times(). f64 tensors, which exist for checks and which oneDNN does not compute, run on the
// reference loops.
#include "../backend.h"
#include "cpu_kernels.h"
#include "onednn_context.h"

namespace mantissa::detail {
namespace {

bool any_f64(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->dtype() == DType::f64) return true;
  }
  return false;
}

// A convolution pass's multiply-adds, twice: each output element sums (input channels / groups) x kernel
// products; the weight is [out channels, in channels / groups, kh, kw].
double conv_flops(const Tensor& out, const Tensor& w) {
  return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(w.numel() / w.size(0));
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  void copy(const Tensor& src, const Tensor& dst) override {
    FamilyTimer timer(src.dtype() == dst.dtype() ? "copy" : "cast");
    if (any_f64({&src, &dst})) return reference_backend().copy(src, dst);
    cpu_copy(src, dst);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    FamilyTimer timer("elementwise");
    if (any_f64({&a, &b, &out})) return reference_backend().binary(op, a, b, out);
    cpu_binary(op, a, b, out);
  }
  void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) override {
    FamilyTimer timer("elementwise");
    if (any_f64({&x})) return reference_backend().unary(op, alpha, x, out);
    if (!onednn_unary(op, alpha, x, out)) cpu_unary(op, alpha, x, out);
  }
  void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) override {
    FamilyTimer timer("elementwise");
    if (any_f64({&x, &grad_y, &grad_x})) return reference_backend().unary_backward(op, alpha, x, grad_y, grad_x);
    if (!onednn_unary_backward(op, alpha, x, grad_y, grad_x)) cpu_unary_backward(op, alpha, x, grad_y, grad_x);
  }
  void reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out) override {
    FamilyTimer timer("reduce");
    if (any_f64({&x})) return reference_backend().reduce(op, x, axes, out);
    cpu_reduce(op, x, axes, out);
  }
  void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) override {
    FamilyTimer timer("matmul");
    count_matmul_flops(2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(-1)));
    if (any_f64({&a})) return reference_backend().matmul(a, w, bias, out);
    cpu_matmul(a, w, bias, out);
  }
  void softmax(const Tensor& x, const Tensor& y, bool log) override {
    FamilyTimer timer("softmax");
    if (any_f64({&x})) return reference_backend().softmax(x, y, log);
    cpu_softmax(x, y, log);  // oneDNN 2.6's softmax turns a row with NaN or inf into numbers
  }
  void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) override {
    FamilyTimer timer("softmax");
    if (any_f64({&y})) return reference_backend().softmax_backward(y, grad_y, grad_x, log);
    if (!onednn_softmax_backward(y, grad_y, grad_x, log)) cpu_softmax_backward(y, grad_y, grad_x, log);
  }
  void attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs) override {
    FamilyTimer timer("softmax");
    cpu_attention_softmax(scores, scale, causal, probs);
  }
  void attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                  const Tensor& grad_scores) override {
    FamilyTimer timer("softmax");
    cpu_attention_softmax_backward(probs, grad_probs, scale, causal, grad_scores);
  }
  GradientCheck scale_and_check(const Tensor& g, double factor, double underflow_below) override {
    FamilyTimer timer("loss_scaling");
    if (any_f64({&g})) return reference_backend().scale_and_check(g, factor, underflow_below);
    return cpu_scale_and_check(g, factor, underflow_below);
  }
  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s) override {
    FamilyTimer timer("optimizer");
    if (any_f64({&param, &grad})) return reference_backend().sgd_update(param, grad, momentum_buffer, s);
    cpu_sgd_update(param, grad, momentum_buffer, s);
  }
  void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const AdamStep& s) override {
    FamilyTimer timer("optimizer");
    if (any_f64({&param, &grad})) return reference_backend().adam_update(param, grad, m, v, s);
    cpu_adam_update(param, grad, m, v, s);
  }
  void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed) override {
    FamilyTimer timer("optimizer");
    if (any_f64({&src, &dst})) return reference_backend().round_into(src, dst, rounding, seed);
    cpu_round_into(src, dst, rounding, seed);
  }
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override {
    FamilyTimer timer("norm");
    if (any_f64({&x, &gamma, &beta})) return reference_backend().layer_norm(x, gamma, beta, eps, y, mean, rstd);
    if (!onednn_layer_norm(x, gamma, beta, eps, y, mean, rstd)) cpu_layer_norm(x, gamma, beta, eps, y, mean, rstd);
  }
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                           const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                           const Tensor& grad_beta, double eps) override {
    FamilyTimer timer("norm");
    if (any_f64({&x, &gamma, &grad_y})) {
      return reference_backend().layer_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta, eps);
    }
    if (!onednn_layer_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta, eps)) {
      cpu_layer_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
    }
  }
  void cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                     double smoothing, const Tensor& probs, const Tensor& losses) override {
    FamilyTimer timer("cross_entropy");
    if (any_f64({&logits})) return reference_backend().cross_entropy(logits, targets, ignore_index, smoothing, probs, losses);
    cpu_cross_entropy(logits, targets, ignore_index, smoothing, probs, losses);
  }
  void cross_entropy_backward(const Tensor& probs, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                              double smoothing, const Tensor& grad_losses, const Tensor& grad_logits) override {
    FamilyTimer timer("cross_entropy");
    if (any_f64({&probs})) {
      return reference_backend().cross_entropy_backward(probs, targets, ignore_index, smoothing, grad_losses, grad_logits);
    }
    cpu_cross_entropy_backward(probs, targets, ignore_index, smoothing, grad_losses, grad_logits);
  }
  void embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) override {
    FamilyTimer timer("embedding");
    if (any_f64({&weight})) return reference_backend().embedding(weight, ids, out);
    cpu_embedding(weight, ids, out);
  }
  void embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) override {
    FamilyTimer timer("embedding");
    if (any_f64({&grad_out, &grad_weight})) return reference_backend().embedding_backward(ids, grad_out, grad_weight);
    cpu_embedding_backward(ids, grad_out, grad_weight);
  }
  void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) override {
    FamilyTimer timer("conv");
    count_matmul_flops(conv_flops(out, w));
    if (any_f64({&x})) return reference_backend().conv2d(x, w, p, out);
    cpu_conv2d(x, w, p, out);
  }
  void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) override {
    FamilyTimer timer("conv");
    count_matmul_flops(conv_flops(grad_out, w));
    if (any_f64({&grad_out})) return reference_backend().conv2d_backward_data(grad_out, w, p, grad_x);
    cpu_conv2d_backward_data(grad_out, w, p, grad_x);
  }
  void conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p,
                               const Tensor& grad_w) override {
    FamilyTimer timer("conv");
    count_matmul_flops(conv_flops(grad_out, grad_w));
    if (any_f64({&x})) return reference_backend().conv2d_backward_weights(x, grad_out, p, grad_w);
    cpu_conv2d_backward_weights(x, grad_out, p, grad_w);
  }
  void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) override {
    FamilyTimer timer("pool");
    if (any_f64({&x})) return reference_backend().pool2d(x, p, out);
    cpu_pool2d(x, p, out);
  }
  void pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x) override {
    FamilyTimer timer("pool");
    if (any_f64({&x})) return reference_backend().pool2d_backward(x, grad_out, p, grad_x);
    cpu_pool2d_backward(x, grad_out, p, grad_x);
  }
  void batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override {
    FamilyTimer timer("norm");
    if (any_f64({&x, &gamma})) return reference_backend().batch_norm(x, gamma, beta, eps, y, mean, rstd);
    cpu_batch_norm(x, gamma, beta, eps, y, mean, rstd);
  }
  void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                           const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                           const Tensor& grad_beta) override {
    FamilyTimer timer("norm");
    if (any_f64({&x, &gamma, &grad_y})) {
      return reference_backend().batch_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
    }
    cpu_batch_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace mantissa::detail
