// Normalization front-ends: layer norm (over the last axis) and batch norm (per channel, with running
// statistics), both computed in f32 whatever the dtype they read and write, and their backward rules.
#include <cmath>
#include <stdexcept>
#include <string>

#include "../core/channels_last.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

class LayerNormNode final : public Node {
 public:
  LayerNormNode(const Tensor& x2, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, double eps,
                DType y_dtype)
      : x_(save_for_backward(x2)), gamma_(save_for_backward(gamma)), mean_(save_for_backward(mean)),
        rstd_(save_for_backward(rstd)), eps_(eps), y_dtype_(y_dtype) {}
  std::string_view name() const override { return "layer_norm"; }
  void release() override { x_ = gamma_ = mean_ = rstd_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const std::int64_t c = x_.size(1);
    const Tensor g2 = reshape(contiguous(cast(g, y_dtype_)), {-1, c});
    Tensor gx = Tensor::empty(x_.shape(), x_.dtype(), x_.device());
    Tensor gg = Tensor::empty({c}, mean_.dtype(), x_.device());
    Tensor gb = Tensor::empty({c}, mean_.dtype(), x_.device());
    run_kernel_on<kernel::LayerNormBackward>(x_, x_, gamma_, mean_, rstd_, g2, gx, gg, gb, eps_);
    return {reshape(gx, inputs[0].shape), gg, gb};
  }

 private:
  Tensor x_, gamma_, mean_, rstd_;
  double eps_;
  DType y_dtype_;  // the output's, which its gradient comes in
};

// x [N, C, ...] as [N, C, S] for the batch-norm kernels: a view of its own memory, NCHW or channels-last.
Tensor as_channel_rows(const Tensor& x, const Shape& nc_s) {
  if (detail::is_channels_last(x) && !x.is_contiguous()) {
    return make_view(x, nc_s, {nc_s[1] * nc_s[2], 1, nc_s[1]}, x.offset());
  }
  return make_view(x, nc_s, contiguous_strides(nc_s), x.offset());
}

class BatchNormNode final : public Node {
 public:
  BatchNormNode(const Tensor& x3, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, DType y_dtype)
      : x_(save_for_backward(x3)), gamma_(save_for_backward(gamma)), mean_(save_for_backward(mean)),
        rstd_(save_for_backward(rstd)), y_dtype_(y_dtype) {}
  std::string_view name() const override { return "batch_norm"; }
  void release() override { x_ = gamma_ = mean_ = rstd_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    // The gradients in x's layout: NCHW, or channels-last (x_ then [N, C, S] strided [S C, 1, C]).
    const bool channels_last = x_.size(1) > 1 && x_.size(2) > 1 && x_.strides()[1] == 1;
    const Tensor gl = channels_last ? detail::to_channels_last(cast(g, y_dtype_)) : contiguous(cast(g, y_dtype_));
    const Tensor gx = channels_last ? detail::empty_channels_last(inputs[0].shape, x_.dtype(), x_.device())
                                    : Tensor::empty(inputs[0].shape, x_.dtype(), x_.device());
    const Tensor g3 = as_channel_rows(gl, x_.shape()), gx3 = as_channel_rows(gx, x_.shape());
    Tensor gg = Tensor::empty({x_.size(1)}, mean_.dtype(), x_.device());
    Tensor gb = Tensor::empty({x_.size(1)}, mean_.dtype(), x_.device());
    run_kernel_on<kernel::BatchNormBackward>(g3, x_, gamma_, mean_, rstd_, g3, gx3, gg, gb);
    return {gx, gg, gb};
  }

 private:
  Tensor x_, gamma_, mean_, rstd_;
  DType y_dtype_;  // the output's, which its gradient comes in
};

// What both layer norm ops take: x with values, an output dtype with values, gamma and beta [C].
void check_layer_norm(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta, DType y_dtype) {
  detail::check_computable(x, op);
  if (is_storage_only(y_dtype)) {
    throw std::invalid_argument(std::string(op) + ": the output dtype must be f32, f64, bf16 or f16, not " +
                                std::string(dtype_name(y_dtype)));
  }
  detail::check_computable(gamma, op);
  detail::check_computable(beta, op);
  const std::int64_t c = x.size(-1);
  if (gamma.shape() != Shape{c} || beta.shape() != Shape{c}) {
    throw std::invalid_argument(std::string(op) + ": gamma and beta must be [" + std::to_string(c) + "], got " +
                                shape_str(gamma.shape()) + " and " + shape_str(beta.shape()));
  }
}

// Statistics in f32, or f64 for f64 data (f32 statistics would limit the backward's precision there).
DType statistics_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

}  // namespace

DType layer_norm_output_dtype(DType x) { return detail::autocast_input_dtype(x, AutocastOp::layer_norm); }
DType layer_norm_output_dtype(DType x, DType r) { return layer_norm_output_dtype(detail::promote(x, r)); }

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  // Under autocast's f32 policy the result is f32, but the kernel reads a bf16 or f16 input as it is (it
  // computes in f32 whatever it reads): no f32 copy of the input is made or kept for backward.
  detail::check_computable(x, "layer_norm");
  return layer_norm(x, gamma, beta, eps, layer_norm_output_dtype(x.dtype()));
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, DType y_dtype) {
  check_layer_norm("layer_norm", x, gamma, beta, y_dtype);
  const std::int64_t c = x.size(-1);
  const Tensor x2 = reshape(contiguous(x), {-1, c});
  const std::int64_t rows = x2.size(0);
  Tensor y = Tensor::empty(x.shape(), y_dtype, x.device());
  const DType stats = statistics_dtype(x.dtype());
  Tensor mean = Tensor::empty({rows}, stats, x.device());
  Tensor rstd = Tensor::empty({rows}, stats, x.device());
  {
    NoGradGuard no_grad;
    run_kernel_on<kernel::LayerNorm>(x, x2.detach(), gamma, beta, eps, reshape(y, {-1, c}), mean, rstd);
  }
  if (needs_grad({&x, &gamma, &beta})) {
    record(y, std::make_shared<LayerNormNode>(x2.detach(), gamma, mean, rstd, eps, y_dtype), {&x, &gamma, &beta});
  }
  return y;
}

std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& gamma, const Tensor& beta, double eps,
                                         DType y_dtype) {
  detail::check_computable(x, "add_layer_norm");
  detail::check_computable(r, "add_layer_norm");
  if (r.shape() != x.shape()) {  // a broadcast residual: the two ops
    const Tensor s = add(x, r);
    return {s, layer_norm(s, gamma, beta, eps, y_dtype)};
  }
  check_layer_norm("add_layer_norm", x, gamma, beta, y_dtype);
  const std::int64_t c = x.size(-1);
  const Tensor x2 = reshape(contiguous(x), {-1, c}), r2 = reshape(contiguous(r), {-1, c});
  const std::int64_t rows = x2.size(0);
  const Tensor s = Tensor::empty(x.shape(), detail::promote(x.dtype(), r.dtype()), x.device());
  const Tensor y = Tensor::empty(x.shape(), y_dtype, x.device());
  const DType stats = statistics_dtype(s.dtype());
  const Tensor mean = Tensor::empty({rows}, stats, x.device()), rstd = Tensor::empty({rows}, stats, x.device());
  const Tensor s2 = reshape(s, {-1, c});
  {
    NoGradGuard no_grad;
    run_kernel_on<kernel::AddLayerNorm>(x, x2.detach(), r2.detach(), gamma, beta, eps, s2, reshape(y, {-1, c}), mean, rstd);
  }
  detail::record_add(s, x, r);  // the history add() and layer_norm() would give: an add, then a norm of its sum
  if (needs_grad({&s, &gamma, &beta})) {
    record(y, std::make_shared<LayerNormNode>(s2.detach(), gamma, mean, rstd, eps, y_dtype), {&s, &gamma, &beta});
  }
  return {s, y};
}

Tensor batch_norm(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  detail::check_computable(x_in, "batch_norm");
  // Training: under autocast's f32 policy the result is f32, but the kernel reads a bf16 or f16 input as
  // it is (it computes in f32 whatever it reads), so no f32 copy of the input is made or kept.
  const DType y_dtype = detail::autocast_input_dtype(x_in, AutocastOp::batch_norm);
  const Tensor x = training ? x_in : detail::autocast_input(x_in, AutocastOp::batch_norm);
  if (x.dim() < 2) throw std::invalid_argument("batch_norm: x [N, C, ...] expected, got " + shape_str(x.shape()));
  const std::int64_t c = x.size(1);
  for (const Tensor* t : {&gamma, &beta, &running_mean, &running_var}) {
    if (!t->defined() || t->shape() != Shape{c}) {
      throw std::invalid_argument("batch_norm: gamma, beta and running statistics must be [" + std::to_string(c) + "]");
    }
    if (t->device() != x.device()) {
      throw std::invalid_argument("batch_norm: gamma, beta and running statistics must be on " + x.device().str() + " with x, not on " +
                                  t->device().str());
    }
  }
  Shape bshape(static_cast<std::size_t>(x.dim()), 1);
  bshape[1] = c;
  if (!training) {
    // (x - running_mean) / sqrt(running_var + eps) * gamma + beta, in f32 (f64 for f64), by broadcasting.
    const DType f = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
    const Tensor scale = mul(cast(gamma, f), pow(add(cast(running_var.detach(), f), eps), -0.5));
    const Tensor shift = sub(cast(beta, f), mul(cast(running_mean.detach(), f), scale));
    return cast(add(mul(cast(x, f), reshape(scale, bshape)), reshape(shift, bshape)), x.dtype());
  }
  const std::int64_t s = x.numel() / (x.size(0) * c);
  // Channels-last data (the convolution chain's on the CPU) stays so; the rest is made contiguous.
  const bool channels_last = detail::is_channels_last(x) && !x.is_contiguous() && detail::channels_last_activations(x);
  const Tensor xl = channels_last ? x : contiguous(x);
  const Tensor x3 = as_channel_rows(xl, {x.size(0), c, s});
  if (x.size(0) * s < 2) throw std::invalid_argument("batch_norm: training needs more than one value per channel");
  Tensor y = channels_last ? detail::empty_channels_last(x.shape(), y_dtype, x.device()) : Tensor::empty(x.shape(), y_dtype, x.device());
  // Statistics in f32, or f64 for f64 data (f32 statistics would limit the backward's precision there).
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor mean = Tensor::empty({c}, stats, x.device());
  Tensor rstd = Tensor::empty({c}, stats, x.device());
  {
    NoGradGuard no_grad;
    run_kernel_on<kernel::BatchNorm>(x, x3.detach(), gamma, beta, eps, as_channel_rows(y, x3.shape()), mean, rstd);
    // Running statistics: the unbiased variance, recovered from rstd.
    const double m = static_cast<double>(x.size(0) * s);
    const Tensor var = mul(add(pow(rstd, -2.0), -eps), m / (m - 1));
    run_kernel_on<kernel::Copy>(x, add(mul(running_mean, 1 - momentum), mul(mean, momentum)), running_mean);
    run_kernel_on<kernel::Copy>(x, add(mul(running_var, 1 - momentum), mul(var, momentum)), running_var);
  }
  if (needs_grad({&x, &gamma, &beta})) {
    record(y, std::make_shared<BatchNormNode>(x3.detach(), gamma, mean, rstd, y_dtype), {&x, &gamma, &beta});
  }
  return y;
}

}  // namespace mantissa
