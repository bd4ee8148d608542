// Convolution, pooling and batch norm front-ends: shapes, dtypes, running statistics, and backward rules.
#include <stdexcept>
#include <string>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

std::int64_t out_size(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t pad, std::int64_t dilation,
                      const char* op) {
  const std::int64_t span = dilation * (kernel - 1) + 1;
  if (in + 2 * pad < span || stride <= 0) {
    throw std::invalid_argument(std::string(op) + ": window of " + std::to_string(span) + " does not fit input of " +
                                std::to_string(in) + " with padding " + std::to_string(pad));
  }
  return (in + 2 * pad - span) / stride + 1;
}

class ConvNode final : public Node {
 public:
  ConvNode(const Tensor& x, const Tensor& w, const Conv2dParams& p)
      : x_(save_for_backward(x)), w_(save_for_backward(w)), p_(p) {}
  std::string_view name() const override { return "conv2d"; }
  void release() override { x_ = w_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor gc = contiguous(cast(g, x_.dtype()));
    Tensor gx, gw;
    if (inputs[0].node) {
      gx = Tensor::empty(x_.shape(), x_.dtype(), x_.device());
      run_kernel_on<kernel::Conv2dBackwardData>(gc, gc, w_, p_, gx);
    }
    if (inputs[1].node) {
      gw = Tensor::empty(w_.shape(), w_.dtype(), w_.device());
      run_kernel_on<kernel::Conv2dBackwardWeights>(gc, x_, gc, p_, gw);
    }
    return {gx, gw};
  }

 private:
  Tensor x_, w_;
  Conv2dParams p_;
};

class PoolNode final : public Node {
 public:
  PoolNode(const Tensor& x, const Pool2dParams& p) : x_(save_for_backward(x)), p_(p) {}
  std::string_view name() const override { return p_.max ? "max_pool2d" : "avg_pool2d"; }
  void release() override { x_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = Tensor::empty(x_.shape(), x_.dtype(), x_.device());
    run_kernel_on<kernel::Pool2dBackward>(g, x_, contiguous(cast(g, x_.dtype())), p_, gx);
    return {gx};
  }

 private:
  Tensor x_;
  Pool2dParams p_;
};

class BatchNormNode final : public Node {
 public:
  BatchNormNode(const Tensor& x3, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, DType y_dtype)
      : x_(save_for_backward(x3)), gamma_(save_for_backward(gamma)), mean_(save_for_backward(mean)),
        rstd_(save_for_backward(rstd)), y_dtype_(y_dtype) {}
  std::string_view name() const override { return "batch_norm"; }
  void release() override { x_ = gamma_ = mean_ = rstd_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor g3 = reshape(contiguous(cast(g, y_dtype_)), x_.shape());
    Tensor gx = Tensor::empty(x_.shape(), x_.dtype(), x_.device());
    Tensor gg = Tensor::empty({x_.size(1)}, mean_.dtype(), x_.device());
    Tensor gb = Tensor::empty({x_.size(1)}, mean_.dtype(), x_.device());
    run_kernel_on<kernel::BatchNormBackward>(g3, x_, gamma_, mean_, rstd_, g3, gx, gg, gb);
    return {reshape(gx, inputs[0].shape), gg, gb};
  }

 private:
  Tensor x_, gamma_, mean_, rstd_;
  DType y_dtype_;  // the output's, which its gradient comes in
};

}  // namespace

Tensor conv2d(const Tensor& x_arg, const Tensor& w_arg, const Tensor& bias, const Conv2dParams& p) {
  const Tensor x_in = detail::autocast_input(x_arg, AutocastOp::conv2d);
  const Tensor w_in = detail::autocast_input(w_arg, AutocastOp::conv2d);
  detail::check_computable(x_in, "conv2d");
  detail::check_computable(w_in, "conv2d");
  if (x_in.dim() != 4 || w_in.dim() != 4) {
    throw std::invalid_argument("conv2d: x [N, C, H, W] and w [O, C/groups, KH, KW] expected, got " +
                                shape_str(x_in.shape()) + " and " + shape_str(w_in.shape()));
  }
  if (p.groups <= 0 || w_in.size(0) % p.groups != 0 || x_in.size(1) != w_in.size(1) * p.groups) {
    throw std::invalid_argument("conv2d: " + std::to_string(x_in.size(1)) + " input channels do not match weight " +
                                shape_str(w_in.shape()) + " with " + std::to_string(p.groups) + " groups");
  }
  const DType dtype = detail::promote(x_in.dtype(), w_in.dtype());
  const Tensor x = contiguous(cast(x_in, dtype));
  const Tensor w = contiguous(cast(w_in, dtype));
  const std::int64_t oh = out_size(x.size(2), w.size(2), p.stride_h, p.pad_h, p.dilation_h, "conv2d");
  const std::int64_t ow = out_size(x.size(3), w.size(3), p.stride_w, p.pad_w, p.dilation_w, "conv2d");
  Tensor out = Tensor::empty({x.size(0), w.size(0), oh, ow}, dtype, x.device());
  run_kernel_on<kernel::Conv2d>(x, x, w, p, out);
  if (needs_grad({&x, &w})) record(out, std::make_shared<ConvNode>(x, w, p), {&x, &w});
  if (bias.defined()) out = add(out, reshape(bias, {1, w.size(0), 1, 1}));
  return out;
}

Tensor pool2d(const Tensor& x_in, const Pool2dParams& p) {
  detail::check_computable(x_in, "pool2d");
  if (x_in.dim() != 4) throw std::invalid_argument("pool2d: x [N, C, H, W] expected, got " + shape_str(x_in.shape()));
  if (p.pad_h * 2 > p.kernel_h || p.pad_w * 2 > p.kernel_w) {
    throw std::invalid_argument("pool2d: padding must be at most half the window");
  }
  const Tensor x = contiguous(x_in);
  const std::int64_t oh = out_size(x.size(2), p.kernel_h, p.stride_h, p.pad_h, 1, "pool2d");
  const std::int64_t ow = out_size(x.size(3), p.kernel_w, p.stride_w, p.pad_w, 1, "pool2d");
  Tensor out = Tensor::empty({x.size(0), x.size(1), oh, ow}, x.dtype(), x.device());
  run_kernel_on<kernel::Pool2d>(x, x, p, out);
  if (needs_grad({&x})) record(out, std::make_shared<PoolNode>(x, p), {&x});
  return out;
}

Tensor max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
  return pool2d(x, {kernel, kernel, stride, stride, padding, padding, true});
}

Tensor avg_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
  return pool2d(x, {kernel, kernel, stride, stride, padding, padding, false});
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
  const Tensor x3 = reshape(contiguous(x), {x.size(0), c, s});
  if (x.size(0) * s < 2) throw std::invalid_argument("batch_norm: training needs more than one value per channel");
  Tensor y = Tensor::empty(x.shape(), y_dtype, x.device());
  // Statistics in f32, or f64 for f64 data (f32 statistics would limit the backward's precision there).
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor mean = Tensor::empty({c}, stats, x.device());
  Tensor rstd = Tensor::empty({c}, stats, x.device());
  {
    NoGradGuard no_grad;
    run_kernel_on<kernel::BatchNorm>(x, x3.detach(), gamma, beta, eps, reshape(y, x3.shape()), mean, rstd);
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
