// Pooling front-ends (max and average, NCHW) and their backward rule.
#include <stdexcept>
#include <string>

#include "../core/channels_last.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

class PoolNode final : public Node {
 public:
  PoolNode(const Tensor& x, const Pool2dParams& p) : x_(save_for_backward(x)), p_(p) {}
  std::string_view name() const override { return p_.max ? "max_pool2d" : "avg_pool2d"; }
  void release() override { x_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const bool channels_last = detail::is_channels_last(x_) && !x_.is_contiguous();
    const Tensor gx = detail::empty_like_layout(x_, x_.shape(), x_.dtype());
    const Tensor gc = channels_last ? detail::to_channels_last(cast(g, x_.dtype())) : contiguous(cast(g, x_.dtype()));
    run_kernel_on<kernel::Pool2dBackward>(g, x_, gc, p_, gx);
    return {gx};
  }

 private:
  Tensor x_;
  Pool2dParams p_;
};

}  // namespace

Tensor pool2d(const Tensor& x_in, const Pool2dParams& p) {
  detail::check_computable(x_in, "pool2d");
  if (x_in.dim() != 4) throw std::invalid_argument("pool2d: x [N, C, H, W] expected, got " + shape_str(x_in.shape()));
  if (p.pad_h * 2 > p.kernel_h || p.pad_w * 2 > p.kernel_w) {
    throw std::invalid_argument("pool2d: padding must be at most half the window");
  }
  // Channels-last data (the convolution chain's) stays so through the 2x2 max pooling, which the CPU runs
  // on it; the rest is made contiguous.
  const bool max_2x2 = p.max && p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 &&
                       p.pad_h == 0 && p.pad_w == 0;
  const bool channels_last = max_2x2 && detail::is_channels_last(x_in) && !x_in.is_contiguous() &&
                             detail::channels_last_activations(x_in);
  const Tensor x = channels_last ? x_in : contiguous(x_in);
  const std::int64_t oh = detail::window_out_size(x.size(2), p.kernel_h, p.stride_h, p.pad_h, 1, "pool2d");
  const std::int64_t ow = detail::window_out_size(x.size(3), p.kernel_w, p.stride_w, p.pad_w, 1, "pool2d");
  const Shape out_shape{x.size(0), x.size(1), oh, ow};
  Tensor out = channels_last ? detail::empty_channels_last(out_shape, x.dtype(), x.device())
                             : Tensor::empty(out_shape, x.dtype(), x.device());
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

}  // namespace mantissa
