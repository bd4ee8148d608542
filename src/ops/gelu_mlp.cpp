// GPT-2's MLP as one op: fc, the tanh GELU and proj, with the GELU inside the products on both passes
// (kernel::MatmulGelu, kernel::MatmulGeluBackward). The three ops in a row would write the first
// product, read it for the GELU and write that; and backward, write the second product's input
// gradient, read it with the first product for the GELU's gradient and write that. On a GPU that is a
// pass over [B T, 4 C] each way per block which cuBLASLt's epilogues do while the products write.
#include <stdexcept>
#include <string>
#include <tuple>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

// Saves what each product's gradients read: x and fc's weight, the GELU's input (pre) and output (h),
// proj's weight, all in the products' dtype.
class GeluMlpNode final : public Node {
 public:
  GeluMlpNode(const Shape& x_shape, const Tensor& x, const Tensor& fc_w, const Tensor& pre, const Tensor& h,
              const Tensor& proj_w)
      : x_shape_(x_shape),
        x_(save_for_backward(x)), fc_w_(save_for_backward(fc_w)), pre_(save_for_backward(pre)), h_(save_for_backward(h)),
        proj_w_(save_for_backward(proj_w)) {}
  std::string_view name() const override { return "gelu_mlp"; }
  void release() override { x_ = fc_w_ = pre_ = h_ = proj_w_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const std::int64_t hidden = fc_w_.size(0), out = proj_w_.size(0);
    const Tensor g2 = reshape(g, {-1, out});
    const auto [g_proj_w, g_proj_b] = detail::linear_parameter_gradients(g2, h_, inputs[3].node != nullptr,
                                                                        inputs[4].node != nullptr);
    Tensor gx, g_fc_w, g_fc_b;
    if (inputs[0].node || inputs[1].node || inputs[2].node) {
      // The GELU's input gradient, gelu_tanh'(pre) (g . proj_w), in one product.
      const DType dtype = detail::promote(g2.dtype(), proj_w_.dtype());
      const Tensor gc = cast(g2, dtype), w = cast(proj_w_, dtype);
      const Tensor g_pre = Tensor::empty({g2.size(0), hidden}, pre_.dtype(), g2.device());
      run_kernel_on<kernel::MatmulGeluBackward>(gc, detail::one_batch(gc), detail::one_batch(w), detail::one_batch(pre_),
                                                detail::one_batch(g_pre));
      std::tie(g_fc_w, g_fc_b) = detail::linear_parameter_gradients(g_pre, x_, inputs[1].node != nullptr,
                                                                    inputs[2].node != nullptr);
      if (inputs[0].node) gx = reshape(matmul(g_pre, fc_w_), x_shape_);
    }
    return {gx, g_fc_w, g_fc_b, g_proj_w, g_proj_b};
  }

 private:
  Shape x_shape_;
  Tensor x_, fc_w_, pre_, h_, proj_w_;  // x as [rows, in]
};

void check_bias(const Tensor& bias, std::int64_t n, const char* which) {
  if (!bias.defined()) return;
  detail::check_computable(bias, "gelu_mlp");
  if (bias.shape() != Shape{n}) {
    throw std::invalid_argument(std::string("gelu_mlp: ") + which + " bias must be [" + std::to_string(n) + "], got " +
                                shape_str(bias.shape()));
  }
}

}  // namespace

Tensor gelu_mlp(const Tensor& x_in, const Tensor& fc_w_in, const Tensor& fc_b, const Tensor& proj_w_in, const Tensor& proj_b) {
  for (const Tensor* t : {&x_in, &fc_w_in, &proj_w_in}) detail::check_computable(*t, "gelu_mlp");
  if (fc_w_in.dim() != 2 || proj_w_in.dim() != 2 || x_in.dim() < 1 || x_in.size(-1) != fc_w_in.size(1) ||
      proj_w_in.size(1) != fc_w_in.size(0)) {
    throw std::invalid_argument("gelu_mlp: x [..., in], fc weight [hidden, in] and proj weight [out, hidden] do not fit: " +
                                shape_str(x_in.shape()) + ", " + shape_str(fc_w_in.shape()) + ", " +
                                shape_str(proj_w_in.shape()));
  }
  const std::int64_t in = fc_w_in.size(1), hidden = fc_w_in.size(0), out = proj_w_in.size(0);
  check_bias(fc_b, hidden, "fc");
  check_bias(proj_b, out, "proj");
  // As linear() casts for fc; proj's product reads the GELU's output in the same dtype.
  const DType compute = detail::autocast_input_dtype(fc_w_in, AutocastOp::linear);
  const Tensor xa = detail::autocast_input(x_in, AutocastOp::linear);
  const DType dtype = detail::promote(xa.dtype(), compute);
  const Tensor x = cast(xa, dtype);
  const Tensor fc_w = cast(detail::autocast_cast(fc_w_in, compute), dtype);
  const Tensor proj_w = cast(detail::autocast_cast(proj_w_in, compute), dtype);
  Tensor pre, h, y;
  {
    NoGradGuard no_grad;  // the node below records the whole MLP
    const Tensor x2 = reshape(x, {-1, in});
    pre = Tensor::empty({x2.size(0), hidden}, dtype, x.device());
    h = Tensor::empty({x2.size(0), hidden}, dtype, x.device());
    const Tensor w = transpose(fc_w, 0, 1);
    run_kernel_on<kernel::MatmulGelu>(x2, detail::one_batch(x2), detail::one_batch(w), fc_b, detail::one_batch(pre),
                                      detail::one_batch(h));
    Shape shape = x.shape();
    shape.back() = out;
    y = reshape(detail::batched_product(h, transpose(proj_w, 0, 1), proj_b, dtype), shape);
  }
  if (needs_grad({&x, &fc_w, &fc_b, &proj_w, &proj_b})) {
    record(y, std::make_shared<GeluMlpNode>(x.shape(), reshape(x, {-1, in}), fc_w, pre, h, proj_w), {&x, &fc_w, &fc_b, &proj_w, &proj_b});
  }
  return y;
}

}  // namespace mantissa
