// The convolution front-end: shapes, dtypes (autocast's low precision), the activations' layout (channels-
// last where the device's convolutions take it with no reorder), and the backward rules for the input and
// the weights.
#include <stdexcept>
#include <string>

#include "../core/channels_last.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

class ConvNode final : public Node {
 public:
  ConvNode(const Tensor& x, const Tensor& w, const Conv2dParams& p, bool channels_last)
      : x_(save_for_backward(x)), w_(save_for_backward(w)), p_(p), channels_last_(channels_last) {}
  std::string_view name() const override { return "conv2d"; }
  void release() override { x_ = w_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    // The gradients in the forward's layout.
    const bool channels_last = channels_last_;
    const Tensor gc = channels_last ? detail::to_channels_last(cast(g, x_.dtype())) : contiguous(cast(g, x_.dtype()));
    Tensor gx, gw;
    if (inputs[0].node) {
      gx = channels_last ? detail::empty_channels_last(x_.shape(), x_.dtype(), x_.device())
                         : Tensor::empty(x_.shape(), x_.dtype(), x_.device());
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
  bool channels_last_;
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
  const Tensor x_cast = cast(x_in, dtype);
  const bool channels_last = detail::channels_last_activations(x_cast);
  const Tensor x = channels_last ? detail::to_channels_last(x_cast) : contiguous(x_cast);
  const Tensor w = contiguous(cast(w_in, dtype));
  const std::int64_t oh = detail::window_out_size(x.size(2), w.size(2), p.stride_h, p.pad_h, p.dilation_h, "conv2d");
  const std::int64_t ow = detail::window_out_size(x.size(3), w.size(3), p.stride_w, p.pad_w, p.dilation_w, "conv2d");
  const Shape out_shape{x.size(0), w.size(0), oh, ow};
  Tensor out = channels_last ? detail::empty_channels_last(out_shape, dtype, x.device()) : Tensor::empty(out_shape, dtype, x.device());
  run_kernel_on<kernel::Conv2d>(x, x, w, p, out);
  if (needs_grad({&x, &w})) record(out, std::make_shared<ConvNode>(x, w, p, channels_last), {&x, &w});
  // The bias in the product's dtype inside autocast regions (as PyTorch's autocast casts it), so that an
  // f32 bias does not promote a low-precision output back to f32.
  if (bias.defined()) out = add(out, reshape(detail::autocast_input(bias, AutocastOp::conv2d), {1, w.size(0), 1, 1}));
  return out;
}

}  // namespace mantissa
