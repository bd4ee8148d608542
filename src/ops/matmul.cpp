// Matrix products: matmul (batched, with transposes as strided views) and linear. The kernel sees
// [B, M, K] . [B, K, N] views; a 2-D right operand is shared by every batch (stride 0).
#include <stdexcept>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {

Tensor matmul_bias(const Tensor& a_in, const Tensor& b_in, const Tensor& bias);

namespace {

// x [..., R, C] as a [B, R, C] view (batch dimensions merged), copying only if they cannot merge.
Tensor as_batched(const Tensor& x) {
  const std::int64_t rank = x.dim();
  const std::int64_t r = x.shape()[static_cast<std::size_t>(rank - 2)];
  const std::int64_t c = x.shape()[static_cast<std::size_t>(rank - 1)];
  const Shape& st = x.strides();
  std::int64_t batch = 1;
  for (std::int64_t i = 0; i < rank - 2; ++i) batch *= x.shape()[static_cast<std::size_t>(i)];
  if (rank == 2) return make_view(x, {1, r, c}, {0, st[0], st[1]}, x.offset());
  // The batch dimensions merge if each steps over the one after it exactly.
  bool mergeable = true;
  for (std::int64_t i = 0; i + 1 < rank - 2; ++i) {
    const auto u = static_cast<std::size_t>(i);
    if (st[u] != st[u + 1] * x.shape()[u + 1]) mergeable = false;
  }
  if (mergeable) return make_view(x, {batch, r, c}, {st[static_cast<std::size_t>(rank - 3)], st[static_cast<std::size_t>(rank - 2)], st[static_cast<std::size_t>(rank - 1)]}, x.offset());
  const Tensor y = contiguous_copy(x);
  return make_view(y, {batch, r, c}, {r * c, c, 1}, 0);
}

class MatmulNode final : public Node {
 public:
  MatmulNode(const Tensor& a, const Tensor& b) : a_(save_for_backward(a)), b_(save_for_backward(b)) {}
  std::string_view name() const override { return "matmul"; }
  void release() override {
    a_ = {};
    b_ = {};
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor ga;
    Tensor gb;
    if (inputs[0].node) ga = matmul(g, transpose(b_, -1, -2));
    if (inputs[1].node) {
      if (b_.dim() == 2 && a_.dim() > 2) {
        const std::int64_t k = a_.size(-1);
        const std::int64_t n = g.size(-1);
        gb = matmul(transpose(reshape(a_, {-1, k}), 0, 1), reshape(g, {-1, n}));
      } else {
        gb = matmul(transpose(a_, -1, -2), g);
      }
    }
    return {ga, gb};
  }

 private:
  Tensor a_, b_;
};

// y = x w^T + b. Its own rule (rather than matmul's and add's) produces dW = g^T x directly in w's
// [out, in] layout, where matmul's rule would compute d(w^T) and transpose it back with a strided copy.
class LinearNode final : public Node {
 public:
  LinearNode(const Tensor& x, const Tensor& w) : x_(save_for_backward(x)), w_(save_for_backward(w)) {}
  std::string_view name() const override { return "linear"; }
  void release() override { x_ = w_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx;
    if (inputs[0].node) gx = matmul(g, w_);
    const auto [gw, gb] = detail::linear_parameter_gradients(reshape(g, {-1, w_.size(0)}), reshape(x_, {-1, w_.size(1)}),
                                                             inputs[1].node != nullptr, inputs[2].node != nullptr);
    return {gx, gw, gb};
  }

 private:
  Tensor x_, w_;
};

}  // namespace

namespace detail {

Tensor one_batch(const Tensor& m) {
  return make_view(m, {1, m.size(0), m.size(1)}, {0, m.strides()[0], m.strides()[1]}, m.offset());
}

std::pair<Tensor, Tensor> linear_parameter_gradients(const Tensor& g2, const Tensor& x2, bool weight, bool bias) {
  const std::int64_t out = g2.size(1), in = x2.size(1);
  Tensor gw, gb;
  if (weight && bias) {
    // dW = g^T x and db = the row sums of g^T, in one pass over g where the device can.
    const DType dtype = promote(g2.dtype(), x2.dtype());
    const Tensor gt = transpose(cast(g2, dtype), 0, 1), xc = cast(x2, dtype);
    gw = Tensor::empty({out, in}, dtype, g2.device());
    gb = Tensor::empty({out}, dtype, g2.device());
    run_kernel_on<kernel::MatmulRowSums>(gt, one_batch(gt), one_batch(xc), one_batch(gw), gb);
    return {gw, gb};
  }
  if (weight) gw = matmul(transpose(g2, 0, 1), x2);
  // db = 1^T g: the column sums as a product, so the backend's matmul (oneDNN, f32 accumulation)
  // computes them; in a bf16 MLP step that took them from 5% of the time to under 1%.
  if (bias) gb = reshape(matmul(Tensor::full({1, g2.size(0)}, 1, g2.dtype(), g2.device()), g2), {out});
  return {gw, gb};
}

Tensor batched_product(const Tensor& a, const Tensor& b, const Tensor& bias, DType out_dtype) {
  const std::int64_t k = a.size(-1);
  Shape shape = a.shape();
  shape.back() = b.size(-1);
  Tensor out = Tensor::empty(shape, out_dtype, a.device());
  NoGradGuard no_grad;
  const Tensor a3 = as_batched(a);
  Tensor b3 = as_batched(b);
  if (b.dim() == 2) b3 = make_view(b3, {a3.size(0), k, b.size(-1)}, {0, b3.strides()[1], b3.strides()[2]}, b3.offset());
  const Tensor o3 = make_view(out, {a3.size(0), a3.size(1), b.size(-1)}, {a3.size(1) * b.size(-1), b.size(-1), 1}, 0);
  run_kernel_on<kernel::Matmul>(a, a3, b3, bias, o3);
  return out;
}

}  // namespace detail

Tensor matmul_bias(const Tensor& a_in, const Tensor& b_in, const Tensor& bias);

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  return matmul_bias(detail::autocast_input(a_in, AutocastOp::matmul), detail::autocast_input(b_in, AutocastOp::matmul),
                     Tensor());
}

// The product with an optional bias [N] added inside the kernel; history only for the product (linear
// records the whole layer itself).
Tensor matmul_bias(const Tensor& a_in, const Tensor& b_in, const Tensor& bias) {
  detail::check_computable(a_in, "matmul");
  detail::check_computable(b_in, "matmul");
  if (a_in.dim() < 2 || b_in.dim() < 2) {
    throw std::invalid_argument("matmul: operands need at least 2 dimensions, got " + shape_str(a_in.shape()) +
                                " and " + shape_str(b_in.shape()));
  }
  const std::int64_t k = a_in.size(-1);
  if (b_in.size(-2) != k) {
    throw std::invalid_argument("matmul: inner dimensions differ: " + shape_str(a_in.shape()) + " . " +
                                shape_str(b_in.shape()));
  }
  if (b_in.dim() > 2) {
    const Shape ab(a_in.shape().begin(), a_in.shape().end() - 2);
    const Shape bb(b_in.shape().begin(), b_in.shape().end() - 2);
    if (ab != bb) {
      throw std::invalid_argument("matmul: batch dimensions differ: " + shape_str(a_in.shape()) + " . " +
                                  shape_str(b_in.shape()));
    }
  }
  const DType dtype = detail::promote(a_in.dtype(), b_in.dtype());
  const Tensor a = cast(a_in, dtype);
  const Tensor b = cast(b_in, dtype);
  const Tensor out = detail::batched_product(a, b, bias, dtype);
  if (needs_grad({&a, &b})) record(out, std::make_shared<MatmulNode>(a, b), {&a, &b});
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) { return linear(x_in, w_in, bias, nullptr); }

DType linear_input_dtype(DType x, DType w, bool fp8) {
  if (fp8 && is_low_precision(detail::autocast_input_dtype(w, AutocastOp::linear))) return x;
  return detail::autocast_input_dtype(x, AutocastOp::linear);
}

DType matmul_input_dtype(DType x) { return detail::autocast_input_dtype(x, AutocastOp::matmul); }
DType linear_cross_entropy_input_dtype(DType x) { return detail::autocast_input_dtype(x, AutocastOp::linear_cross_entropy); }

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const std::shared_ptr<QuantState>& fp8) {
  // The one question to autocast for the weight: the dtype the product runs in. FP8 where the plan put
  // the layer and that is a low-precision one; else the product runs in it, the bias as it is (oneDNN
  // adds an f32 bias before the one rounding of the output).
  const DType compute = detail::autocast_input_dtype(w_in, AutocastOp::linear);
  if (fp8 && is_low_precision(compute)) return fp8_linear(x_in, w_in, bias, fp8);
  const Tensor x = detail::autocast_input(x_in, AutocastOp::linear);
  const Tensor w = detail::autocast_cast(w_in, compute);
  if (w.dim() != 2) throw std::invalid_argument("linear: weight must be [out, in], got " + shape_str(w.shape()));
  if (bias.defined()) {
    detail::check_computable(bias, "linear");
    if (bias.shape() != Shape{w.size(0)}) {
      throw std::invalid_argument("linear: bias must be [" + std::to_string(w.size(0)) + "], got " + shape_str(bias.shape()));
    }
  }
  Tensor y;
  {
    NoGradGuard no_grad;  // the node below records the whole layer
    y = matmul_bias(x, transpose(w, 0, 1), bias);
  }
  if (needs_grad({&x, &w, &bias})) {
    record(y, std::make_shared<LinearNode>(cast(x, y.dtype()), cast(w, y.dtype())), {&x, &w, &bias});
  }
  return y;
}

}  // namespace mantissa
