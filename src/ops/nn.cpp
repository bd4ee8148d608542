// Layer-level ops: layer norm and embedding (with kernels of their own) and dropout
// (composed from other ops, so their backward comes from those ops' rules).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "mantissa/numeric/convert.h"
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

class EmbeddingNode final : public Node {
 public:
  explicit EmbeddingNode(std::span<const std::int64_t> ids) : ids_(ids.begin(), ids.end()) {}
  std::string_view name() const override { return "embedding"; }
  void release() override { ids_.clear(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Shape& ws = inputs[0].shape;
    Tensor gw = Tensor::zeros(ws, DType::f32, g.device());
    run_kernel_on<kernel::EmbeddingBackward>(g, ids_, reshape(g, {-1, ws[1]}), gw);
    return {gw};
  }

 private:
  std::vector<std::int64_t> ids_;
};

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, double eps) {
  // Under autocast's f32 policy the result is f32, but the kernel reads a bf16 or f16 input as it is (it
  // computes in f32 whatever it reads): no f32 copy of the input is made or kept for backward.
  const Tensor& x = x_in;
  detail::check_computable(x, "layer_norm");
  const DType y_dtype = detail::autocast_input_dtype(x_in, AutocastOp::layer_norm);
  detail::check_computable(gamma, "layer_norm");
  detail::check_computable(beta, "layer_norm");
  const std::int64_t c = x.size(-1);
  if (gamma.shape() != Shape{c} || beta.shape() != Shape{c}) {
    throw std::invalid_argument("layer_norm: gamma and beta must be [" + std::to_string(c) + "], got " +
                                shape_str(gamma.shape()) + " and " + shape_str(beta.shape()));
  }
  const Tensor x2 = reshape(contiguous(x), {-1, c});
  const std::int64_t rows = x2.size(0);
  Tensor y = Tensor::empty(x.shape(), y_dtype, x.device());
  // Statistics in f32, or f64 for f64 data (f32 statistics would limit the backward's precision there).
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
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

Tensor embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Shape& ids_shape) {
  detail::check_computable(weight, "embedding");
  if (weight.dim() != 2) throw std::invalid_argument("embedding: weight must be [V, D], got " + shape_str(weight.shape()));
  if (numel_of(ids_shape) != static_cast<std::int64_t>(ids.size())) {
    throw std::invalid_argument("embedding: " + std::to_string(ids.size()) + " ids do not fill shape " +
                                shape_str(ids_shape));
  }
  const std::int64_t v = weight.size(0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= v) {
      throw std::invalid_argument("embedding: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                  " is not in [0, " + std::to_string(v) + ")");
    }
  }
  Shape shape = ids_shape;
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.dtype(), weight.device());
  run_kernel_on<kernel::Embedding>(weight, weight, ids, reshape(out, {-1, weight.size(1)}).detach());
  if (needs_grad({&weight})) record(out, std::make_shared<EmbeddingNode>(ids), {&weight});
  return out;
}

Tensor dropout(const Tensor& x, double p, std::uint64_t seed, bool training) {
  detail::check_computable(x, "dropout");
  if (p < 0 || p > 1) throw std::invalid_argument("dropout: p must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0) return x;
  // Keep element i when its 32 random bits are at or above p * 2^32.
  const double keep_scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p, 32));
  std::vector<double> mask(static_cast<std::size_t>(x.numel()));
  for (std::size_t i = 0; i < mask.size(); ++i) {
    mask[i] = stochastic_bits(seed, i) >= threshold ? keep_scale : 0.0;
  }
  const Tensor m = Tensor::from_values(mask, x.shape(), DType::f32);
  return cast(mul(x, m), x.dtype());
}

}  // namespace mantissa
