// The LSTM cell front-end: the pointwise part of one time step (gates to h and c), fused into one
// kernel and one autograd node, as PyTorch's _thnn_fused_lstm_cell; the products that make the gates are
// ordinary linear ops. The state c is a running sum over time, so autocast keeps it in f32 (the cell's
// entry in the policy) while the products run in low precision.
#include <stdexcept>
#include <string>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

class LstmCellNode final : public Node {
 public:
  LstmCellNode(const Tensor& acts, const Tensor& c_prev, DType gates_dtype)
      : acts_(save_for_backward(acts)), c_prev_(save_for_backward(c_prev)), gates_dtype_(gates_dtype) {}
  std::string_view name() const override { return "lstm_cell"; }
  void release() override { acts_ = c_prev_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const std::int64_t batch = c_prev_.size(0), hidden = c_prev_.size(1);
    const Tensor grad_h = reshape(slice(g, 0, 0, 1), {batch, hidden});
    const Tensor grad_c = reshape(slice(g, 0, 1, 2), {batch, hidden});
    Tensor grad_gates = Tensor::empty({batch, 4 * hidden}, gates_dtype_, g.device());
    Tensor grad_c_prev = Tensor::empty({batch, hidden}, c_prev_.dtype(), g.device());
    run_kernel_on<kernel::LstmCellBackward>(c_prev_, acts_, c_prev_, grad_h, grad_c, grad_gates, grad_c_prev);
    return {grad_gates, grad_gates, grad_c_prev};
  }

 private:
  Tensor acts_, c_prev_;
  DType gates_dtype_;
};

}  // namespace

Tensor lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev_in) {
  const Tensor c_prev = detail::autocast_input(c_prev_in, AutocastOp::lstm_cell);
  for (const Tensor* t : {&x_gates, &h_gates, &c_prev}) detail::check_computable(*t, "lstm_cell");
  if (c_prev.dim() != 2) throw std::invalid_argument("lstm_cell: c_prev must be [B, H], got " + shape_str(c_prev.shape()));
  const std::int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  const Shape gates{batch, 4 * hidden};
  if (x_gates.shape() != gates || h_gates.shape() != gates) {
    throw std::invalid_argument("lstm_cell: x_gates and h_gates must be " + shape_str(gates) + " for c_prev " +
                                shape_str(c_prev.shape()) + ", got " + shape_str(x_gates.shape()) + " and " +
                                shape_str(h_gates.shape()));
  }
  const DType f = c_prev.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor out = Tensor::empty({2, batch, hidden}, c_prev.dtype(), c_prev.device());
  Tensor acts = Tensor::empty({batch, 5 * hidden}, f, c_prev.device());
  {
    NoGradGuard no_grad;
    run_kernel_on<kernel::LstmCell>(c_prev, x_gates, h_gates, c_prev.detach(), out, acts);
  }
  if (needs_grad({&x_gates, &h_gates, &c_prev})) {
    record(out, std::make_shared<LstmCellNode>(acts, c_prev.detach(), detail::promote(x_gates.dtype(), h_gates.dtype())),
           {&x_gates, &h_gates, &c_prev});
  }
  return out;
}

}  // namespace mantissa
