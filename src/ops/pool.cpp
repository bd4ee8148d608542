// Pooling front-ends (max and average, NCHW) and their backward rule.
#include <stdexcept>
#include <string>

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
    Tensor gx = Tensor::empty(x_.shape(), x_.dtype(), x_.device());
    run_kernel_on<kernel::Pool2dBackward>(g, x_, contiguous(cast(g, x_.dtype())), p_, gx);
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
  const Tensor x = contiguous(x_in);
  const std::int64_t oh = detail::window_out_size(x.size(2), p.kernel_h, p.stride_h, p.pad_h, 1, "pool2d");
  const std::int64_t ow = detail::window_out_size(x.size(3), p.kernel_w, p.stride_w, p.pad_w, 1, "pool2d");
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

}  // namespace mantissa
