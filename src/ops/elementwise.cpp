// Elementwise ops: binary with broadcasting, scalar ops and activations, each with its backward rule, and
// dropout (a seeded mask multiplied in, so its backward is mul's).
#include <cmath>
#include <stdexcept>
#include <string>

#include "mantissa/numeric/convert.h"

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name);

class BinaryNode final : public Node {
 public:
  BinaryNode(BinaryOp op, const Tensor& a, const Tensor& b) : op_(op) {
    // add and sub need no saved values; mul and div need the other operand.
    if (op == BinaryOp::mul || op == BinaryOp::div) {
      a_ = save_for_backward(a);
      b_ = save_for_backward(b);
    }
  }
  std::string_view name() const override {
    switch (op_) {
      case BinaryOp::add: return "add";
      case BinaryOp::sub: return "sub";
      case BinaryOp::mul: return "mul";
      case BinaryOp::div: return "div";
      case BinaryOp::eq: return "equal";
    }
    return "binary";
  }
  void release() override {
    a_ = {};
    b_ = {};
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Shape& sa = inputs[0].shape;
    const Shape& sb = inputs[1].shape;
    const bool need_a = inputs[0].node != nullptr;
    const bool need_b = inputs[1].node != nullptr;
    Tensor ga;
    Tensor gb;
    switch (op_) {
      case BinaryOp::add:
        if (need_a) ga = sum_to(g, sa);
        if (need_b) gb = sum_to(g, sb);
        break;
      case BinaryOp::sub:
        if (need_a) ga = sum_to(g, sa);
        if (need_b) gb = neg(sum_to(g, sb));
        break;
      case BinaryOp::mul:
        if (need_a) ga = sum_to(mul(g, b_), sa);
        if (need_b) gb = sum_to(mul(g, a_), sb);
        break;
      case BinaryOp::div:
        if (need_a) ga = sum_to(div(g, b_), sa);
        if (need_b) gb = neg(sum_to(div(mul(g, a_), mul(b_, b_)), sb));
        break;
      case BinaryOp::eq:
        break;
    }
    return {ga, gb};
  }

 private:
  BinaryOp op_;
  Tensor a_, b_;
};

class UnaryNode final : public Node {
 public:
  UnaryNode(UnaryOp op, double alpha, const Tensor& x) : op_(op), alpha_(alpha), x_(save_for_backward(x)) {}
  std::string_view name() const override { return "unary"; }
  void release() override { x_ = {}; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = detail::empty_like_layout(x_, g.shape(), inputs[0].dtype);
    run_kernel_on<kernel::UnaryBackward>(g, op_, alpha_, x_, cast(g, x_.dtype()), gx);
    return {gx};
  }

 private:
  UnaryOp op_;
  double alpha_;
  Tensor x_;
};

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  detail::check_computable(a, name);
  detail::check_computable(b, name);
  const Shape shape = detail::broadcast_shapes(a.shape(), b.shape(), name);
  // In a's layout where it has the output's shape (the convolution chain's channels-last), else contiguous.
  Tensor out = detail::empty_like_layout(a, shape, detail::promote(a.dtype(), b.dtype()));
  {
    NoGradGuard no_grad;  // the expanded views are the kernel's business, not the graph's
    run_kernel_on<kernel::Binary>(a, op, expand(a, shape), expand(b, shape), out);
  }
  if (op != BinaryOp::eq && needs_grad({&a, &b})) {
    record(out, std::make_shared<BinaryNode>(op, a, b), {&a, &b});
  }
  return out;
}

}  // namespace

namespace detail {

void record_add(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (needs_grad({&a, &b})) record(out, std::make_shared<BinaryNode>(BinaryOp::add, a, b), {&a, &b});
}

}  // namespace detail

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b, "mul"); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b, "div"); }
Tensor equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::eq, a, b, "equal"); }

Tensor unary(UnaryOp op, const Tensor& x, double alpha) {
  detail::check_computable(x, "unary op");
  Tensor out = detail::empty_like_layout(x, x.shape(), x.dtype());
  run_kernel_on<kernel::Unary>(x, op, alpha, x, out);
  if (needs_grad({&x})) record(out, std::make_shared<UnaryNode>(op, alpha, x), {&x});
  return out;
}

Tensor add(const Tensor& a, double b) { return unary(UnaryOp::add_scalar, a, b); }
Tensor mul(const Tensor& a, double b) { return unary(UnaryOp::mul_scalar, a, b); }
Tensor pow(const Tensor& a, double exponent) {
  return unary(UnaryOp::pow_scalar, detail::autocast_input(a, AutocastOp::pow), exponent);
}
Tensor neg(const Tensor& x) { return unary(UnaryOp::neg, x); }
Tensor abs(const Tensor& x) { return unary(UnaryOp::abs, x); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::exp, detail::autocast_input(x, AutocastOp::exp)); }
Tensor log(const Tensor& x) { return unary(UnaryOp::log, detail::autocast_input(x, AutocastOp::log)); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::sqrt, detail::autocast_input(x, AutocastOp::sqrt)); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::relu, x); }
Tensor gelu(const Tensor& x) { return unary(UnaryOp::gelu, x); }
Tensor gelu_tanh(const Tensor& x) { return unary(UnaryOp::gelu_tanh, x); }
Tensor silu(const Tensor& x) { return unary(UnaryOp::silu, x); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::sigmoid, x); }

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
  const Tensor m = Tensor::from_values(mask, x.shape(), DType::f32).to(x.device());
  return cast(mul(x, m), x.dtype());
}

}  // namespace mantissa
