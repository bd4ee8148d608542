// Layers: parameters registered with their initial values, forward passes in terms of the ops.
#include "mantissa/nn/layers.h"

#include <cmath>
#include <stdexcept>

#include "mantissa/autograd/watch.h"

namespace mantissa::nn {
namespace {

Tensor uniform_init(const Shape& shape, std::int64_t fan_in, std::uint64_t seed) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return Tensor::uniform(shape, DType::f32, seed, -bound, bound);
}

}  // namespace

Linear::Linear(std::int64_t in, std::int64_t out, std::uint64_t seed, bool bias, double init_stddev)
    : weight_(register_parameter("weight", init_stddev > 0 ? Tensor::randn({out, in}, DType::f32, seed, 0, init_stddev)
                                                           : uniform_init({out, in}, in, seed))),
      bias_(register_parameter("bias", !bias              ? Tensor()
                                       : init_stddev > 0 ? Tensor::zeros({out}, DType::f32)
                                                         : uniform_init({out}, in, seed + 1))) {}

Tensor Linear::forward(const Tensor& x) const {
  const auto scope = forward_scope();
  // The layer's plan entry: FP8 (where the region runs the product in low precision, linear decides).
  return linear(x, weight_, bias_, fp8_active() ? fp8_ : nullptr);
}

DType Linear::reads(DType x) const {
  const auto scope = forward_scope();
  return linear_input_dtype(x, weight_.dtype(), fp8_active());
}

Tensor Linear::forward_gelu_tanh_into(const Linear& next, const Tensor& x) const {
  const bool one_op = !fp8_active() && !next.fp8_active() && current_layer_tap() == nullptr && !trace_nonfinite() &&
                      weight_.dtype() == next.weight_.dtype() && reads(DType::f32) == next.reads(DType::f32) &&
                      reads(DType::bf16) == next.reads(DType::bf16);
  if (!one_op) return next.forward(gelu_tanh(forward(x)));
  const auto scope = forward_scope();
  return gelu_mlp(x, weight_, bias_, next.weight_, next.bias_);
}

void Linear::enable_fp8(const QuantOptions& options) {
  if (fp8_) throw std::logic_error("Linear::enable_fp8: FP8 is already enabled for this layer");
  fp8_ = std::make_shared<QuantState>(options);
  if (options.recipe == QuantRecipe::delayed) {
    // On the host on every device: the recipe reads and rolls them there each step.
    register_buffer("fp8_amax_history", fp8_->amax_history(), /*on_host=*/true);
    register_buffer("fp8_scale", fp8_->scale(), /*on_host=*/true);
  }
  if (options.keeps_rounding_count()) register_buffer("fp8_rounding_calls", fp8_->rounding_calls(), /*on_host=*/true);
}

Conv2d::Conv2d(std::int64_t in, std::int64_t out, std::int64_t kernel, std::uint64_t seed, std::int64_t stride,
               std::int64_t padding, bool bias, double init_stddev, std::int64_t dilation)
    : weight_(register_parameter("weight", init_stddev > 0
                                               ? Tensor::randn({out, in, kernel, kernel}, DType::f32, seed, 0, init_stddev)
                                               : uniform_init({out, in, kernel, kernel}, in * kernel * kernel, seed))),
      bias_(register_parameter("bias", !bias              ? Tensor()
                                       : init_stddev > 0 ? Tensor::zeros({out}, DType::f32)
                                                         : uniform_init({out}, in * kernel * kernel, seed + 1))),
      p_{stride, stride, padding, padding, dilation, dilation, 1} {}

Tensor Conv2d::forward(const Tensor& x) const {
  const auto scope = forward_scope();
  return conv2d(x, weight_, bias_, p_);
}

BatchNorm2d::BatchNorm2d(std::int64_t channels, double momentum, double eps)
    : gamma_(register_parameter("weight", Tensor::full({channels}, 1.0, DType::f32))),
      beta_(register_parameter("bias", Tensor::zeros({channels}, DType::f32))),
      running_mean_(register_buffer("running_mean", Tensor::zeros({channels}, DType::f32))),
      running_var_(register_buffer("running_var", Tensor::full({channels}, 1.0, DType::f32))),
      momentum_(momentum),
      eps_(eps) {
  keep_parameters_f32();
}

Tensor BatchNorm2d::forward(const Tensor& x) const {
  const auto scope = forward_scope();
  return batch_norm(x, gamma_, beta_, running_mean_, running_var_, training(), momentum_, eps_);
}

LayerNorm::LayerNorm(std::int64_t channels, double eps)
    : gamma_(register_parameter("weight", Tensor::full({channels}, 1.0, DType::f32))),
      beta_(register_parameter("bias", Tensor::zeros({channels}, DType::f32))),
      eps_(eps) {
  keep_parameters_f32();
}

Tensor LayerNorm::forward(const Tensor& x) const {
  const auto scope = forward_scope();
  return layer_norm(x, gamma_, beta_, eps_);
}

Tensor LayerNorm::forward_for(const Tensor& x, const std::function<DType(DType)>& reads) const {
  DType own;  // what forward(x) would make
  {
    const auto scope = forward_scope();
    own = layer_norm_output_dtype(x.dtype());
  }
  const DType out = reads(own);  // asked in the caller's region (the product's layer enters its own)
  const auto scope = forward_scope();
  return layer_norm(x, gamma_, beta_, eps_, out);
}

std::pair<Tensor, Tensor> LayerNorm::forward_for(const Tensor& x, const Tensor& r,
                                                 const std::function<DType(DType)>& reads) const {
  if (trace_nonfinite()) {
    const Tensor sum = add(x, r);
    return {sum, forward_for(sum, reads)};
  }
  DType own;  // what forward(x + r) would make
  {
    const auto scope = forward_scope();
    own = layer_norm_output_dtype(x.dtype(), r.dtype());
  }
  const DType out = reads(own);
  const auto scope = forward_scope();
  return add_layer_norm(x, r, gamma_, beta_, eps_, out);
}

Embedding::Embedding(std::int64_t vocab, std::int64_t dim, std::uint64_t seed, double stddev)
    : weight_(register_parameter("weight", Tensor::randn({vocab, dim}, DType::f32, seed, 0, stddev))) {}

Tensor Embedding::forward(std::span<const std::int64_t> ids, const Shape& ids_shape) const {
  return embedding(weight_, ids, ids_shape);
}

}  // namespace mantissa::nn
