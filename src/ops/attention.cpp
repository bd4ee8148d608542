// Scaled dot-product attention as one op with its own backward. The two products run on the matmul
// kernel in the inputs' dtype, the scores come out in f32, and scale, causal mask and softmax are one
// kernel that writes the probabilities in the inputs' dtype. Backward keeps q, k, v and those
// probabilities only (no f32 score matrices), and counts under the "attention" kernel region.
#include <cmath>
#include <stdexcept>

#include "mantissa/amp/autocast.h"
#include "mantissa/ops/kernel_timer.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

// x [..., R, C] as [B, R, C] with the batch dimensions merged (a view where they merge).
Tensor as_3d(const Tensor& x) { return reshape(x, {-1, x.size(-2), x.size(-1)}); }

// The softmax's reduction dtype: f32, or f64 for f64 inputs.
DType score_dtype(DType inputs) { return inputs == DType::f64 ? DType::f64 : DType::f32; }

class AttentionNode final : public Node {
 public:
  AttentionNode(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, double scale)
      : q_(save_for_backward(q)), k_(save_for_backward(k)), v_(save_for_backward(v)),
        probs_(save_for_backward(probs)), scale_(scale) {}
  std::string_view name() const override { return "attention"; }
  void release() override {
    q_ = k_ = v_ = probs_ = {};
  }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    const DType dtype = q_.dtype();
    const Tensor g = cast(g_in, dtype);
    // dP = g v^T in f32; dS = scale P (dP - rowsum(dP P)); dq = dS k, dk = dS^T q, dv = P^T g.
    const Tensor grad_probs = detail::batched_product(g, transpose(v_, -1, -2), Tensor(), score_dtype(dtype));
    const Tensor grad_scores = Tensor::empty(probs_.shape(), dtype, probs_.device());
    detail::backend_of(probs_).attention_softmax_backward(as_3d(probs_), as_3d(grad_probs), scale_, as_3d(grad_scores));
    return {detail::batched_product(grad_scores, k_, Tensor(), dtype),
            detail::batched_product(transpose(grad_scores, -1, -2), q_, Tensor(), dtype),
            detail::batched_product(transpose(probs_, -1, -2), g, Tensor(), dtype)};
  }

 private:
  Tensor q_, k_, v_, probs_;
  double scale_;
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal) {
  const KernelRegion region("attention");
  detail::check_computable(q_in, "attention");
  detail::check_computable(k_in, "attention");
  detail::check_computable(v_in, "attention");
  if (q_in.dim() < 2 || k_in.dim() != q_in.dim() || v_in.dim() != q_in.dim() || k_in.size(-1) != q_in.size(-1) ||
      v_in.size(-2) != k_in.size(-2)) {
    throw std::invalid_argument("attention: q [..., T, D], k [..., S, D], v [..., S, Dv] expected, got " +
                                shape_str(q_in.shape()) + ", " + shape_str(k_in.shape()) + ", " + shape_str(v_in.shape()));
  }
  const Shape batch(q_in.shape().begin(), q_in.shape().end() - 2);
  if (Shape(k_in.shape().begin(), k_in.shape().end() - 2) != batch ||
      Shape(v_in.shape().begin(), v_in.shape().end() - 2) != batch) {
    throw std::invalid_argument("attention: batch dimensions differ: " + shape_str(q_in.shape()) + ", " +
                                shape_str(k_in.shape()) + ", " + shape_str(v_in.shape()));
  }
  // The products are matmuls for autocast: low precision in a region, f32 where asked.
  const Tensor q0 = detail::autocast_input(q_in, AutocastOp::matmul);
  const Tensor k0 = detail::autocast_input(k_in, AutocastOp::matmul);
  const Tensor v0 = detail::autocast_input(v_in, AutocastOp::matmul);
  const DType dtype = detail::promote(detail::promote(q0.dtype(), k0.dtype()), v0.dtype());
  const Tensor q = cast(q0, dtype), k = cast(k0, dtype), v = cast(v0, dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor probs, out;
  {
    NoGradGuard no_grad;
    const Tensor scores = detail::batched_product(q, transpose(k, -1, -2), Tensor(), score_dtype(dtype));
    probs = Tensor::empty(scores.shape(), dtype, scores.device());
    detail::backend_of(q).attention_softmax(as_3d(scores), scale, causal, as_3d(probs));
    out = detail::batched_product(probs, v, Tensor(), dtype);
  }
  if (needs_grad({&q, &k, &v})) record(out, std::make_shared<AttentionNode>(q, k, v, probs, scale), {&q, &k, &v});
  return out;
}

}  // namespace mantissa
