// The layers the models are built from. Initialization follows PyTorch's defaults (uniform within
// 1/sqrt(fan in) for linear and convolution weights and biases) unless a model sets its own.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "mantissa/nn/module.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/ops/ops.h"

namespace mantissa::nn {

class Linear : public Module {
 public:
  // init_stddev > 0: weight normal(0, init_stddev) and bias zero (GPT-2's initialization) instead of
  // PyTorch's default uniform.
  Linear(std::int64_t in, std::int64_t out, std::uint64_t seed, bool bias = true, double init_stddev = 0);
  Tensor forward(const Tensor& x) const;
  // The dtype this layer's product reads an input of dtype x in (its own autocast region and FP8 plan).
  DType reads(DType x) const;
  // next.forward(gelu_tanh(forward(x))), GPT-2's MLP: as one op (gelu_mlp: the GELU inside the products,
  // both ways) where both layers run their products alike (weights of one dtype, the same autocast
  // region, no FP8) and no one watches a layer's own output (the telemetry's taps, the non-finite
  // tracer); else as the three ops.
  Tensor forward_gelu_tanh_into(const Linear& next, const Tensor& x) const;
  Tensor& weight() { return weight_; }  // [out, in]
  Tensor& bias() { return bias_; }
  // Runs the product in FP8 from now on, inside autocast regions that run linear layers in low
  // precision (a keep_in_f32() override keeps it out); delayed scaling's history and scales become the
  // buffers fp8_amax_history and fp8_scale. Once per layer.
  void enable_fp8(const QuantOptions& options);
  const std::shared_ptr<QuantState>& fp8() const { return fp8_; }
  // With FP8 enabled, whether the products run in it (on by enable_fp8; the adaptive precision
  // controller switches it).
  void set_fp8_active(bool on) { fp8_active_ = on; }
  bool fp8_active() const { return fp8_ && fp8_active_; }

 private:
  Tensor& weight_;
  Tensor& bias_;
  std::shared_ptr<QuantState> fp8_;
  bool fp8_active_ = true;
};

class Conv2d : public Module {
 public:
  // init_stddev > 0: weight normal(0, init_stddev) and bias zero (as detection heads start) instead of
  // PyTorch's default uniform. dilation spreads the kernel's taps (a 3x3 kernel at dilation d sees 2d + 1).
  Conv2d(std::int64_t in, std::int64_t out, std::int64_t kernel, std::uint64_t seed, std::int64_t stride = 1,
         std::int64_t padding = 0, bool bias = true, double init_stddev = 0, std::int64_t dilation = 1);
  Tensor forward(const Tensor& x) const;

 private:
  Tensor& weight_;
  Tensor& bias_;
  Conv2dParams p_;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t channels, double momentum = 0.1, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;

 private:
  Tensor& gamma_;
  Tensor& beta_;
  Tensor& running_mean_;
  Tensor& running_var_;
  double momentum_, eps_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t channels, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;
  // forward(x) for an output that only a product uses: made in the dtype the product reads it in
  // (reads(d): the dtype it makes of an input of dtype d, as Linear::reads), rounded once. Under autocast
  // that is the product's low-precision copy itself, the same bits as its own cast of the f32 output,
  // without the f32 output written and read back or the cast's pass in either direction.
  Tensor forward_for(const Tensor& x, const std::function<DType(DType)>& reads) const;
  // The same for the sum x + r (a residual add before the norm): {x + r, its norm}, the add inside the
  // norm's pass (add_layer_norm); under the non-finite tracer the two ops, the add in the caller's scope
  // (where the tracer names it).
  std::pair<Tensor, Tensor> forward_for(const Tensor& x, const Tensor& r, const std::function<DType(DType)>& reads) const;

 private:
  Tensor& gamma_;
  Tensor& beta_;
  double eps_;
};

class Embedding : public Module {
 public:
  Embedding(std::int64_t vocab, std::int64_t dim, std::uint64_t seed, double stddev = 0.02);
  Tensor forward(std::span<const std::int64_t> ids, const Shape& ids_shape) const;
  Tensor& weight() { return weight_; }

 private:
  Tensor& weight_;
};

}  // namespace mantissa::nn
