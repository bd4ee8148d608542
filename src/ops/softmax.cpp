// Softmax and log-softmax, computed in f32 whatever the dtype they read and write (the losses built on
// them are in loss.cpp).
#include <cmath>
#include <stdexcept>
#include <string>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

class SoftmaxNode final : public Node {
 public:
  SoftmaxNode(const Tensor& y, bool log) : y_(save_for_backward(y)), log_(log) {}
  std::string_view name() const override { return log_ ? "log_softmax" : "softmax"; }
  void release() override { y_ = {}; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const std::int64_t c = y_.size(-1);
    const Tensor y2 = reshape(y_, {-1, c});
    const Tensor g2 = reshape(contiguous(cast(g, y_.dtype())), {-1, c});
    Tensor gx = Tensor::empty(y2.shape(), y_.dtype(), y_.device());
    run_kernel_on<kernel::SoftmaxBackward>(y_, y2, g2, gx, log_);
    return {reshape(gx, inputs[0].shape)};
  }

 private:
  Tensor y_;
  bool log_;
};

Tensor softmax_last(const Tensor& x, bool log) {
  const std::int64_t c = x.size(-1);
  const Tensor x2 = reshape(contiguous(x), {-1, c});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  {
    NoGradGuard no_grad;
    run_kernel_on<kernel::Softmax>(x, x2, reshape(y, {-1, c}), log);
  }
  if (needs_grad({&x})) record(y, std::make_shared<SoftmaxNode>(y, log), {&x});
  return y;
}

Tensor softmax_any(const Tensor& x, std::int64_t axis, bool log, const char* name) {
  detail::check_computable(x, name);
  if (x.dim() == 0) throw std::invalid_argument(std::string(name) + " of a scalar");
  axis = detail::normalize_axis(axis, x.dim(), name);
  const std::int64_t last = x.dim() - 1;
  if (axis == last) return softmax_last(x, log);
  return transpose(softmax_last(transpose(x, axis, last), log), axis, last);
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t axis) {
  return softmax_any(detail::autocast_input(x, AutocastOp::softmax), axis, false, "softmax");
}
Tensor log_softmax(const Tensor& x, std::int64_t axis) {
  return softmax_any(detail::autocast_input(x, AutocastOp::log_softmax), axis, true, "log_softmax");
}

}  // namespace mantissa
