// Scaled dot-product attention as one op with its own backward. Autocast casts its inputs as its policy
// for AutocastOp::attention says (low precision by default; f32 where a run keeps attention in f32, as
// --fp32-ops default,attention does). The two products run on the matmul kernel in the inputs' dtype,
// the scores come out in f32, and scale, causal mask and softmax are one kernel that writes the
// probabilities in the inputs' dtype. Backward keeps q, k, v and those probabilities only (no f32
// score matrices), and counts under the "attention" kernel region.
//
// Self-attention can also run in blocks of query rows (as memory-efficient attention does): each block's
// scores against only the keys it sees (causal: those up to its last row, about half the products),
// never the whole [B * H, T, T] at once, and nothing of that size kept for backward, which recomputes
// each block's probabilities with the same kernels (so the same bits) from q and k.
//
// Where a device has a fused attention kernel (the GPU: cuDNN's, backend/fused_attention.h), self-
// attention runs as that one kernel forward and one backward, which keep only the softmax's statistics
// ([B, H, T] in f32) besides q, k, v and the output; the composition above is then its oracle.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/ops/autocast.h"
#include "mantissa/backend/kernel_timer.h"
#include "mantissa/ops/ops.h"
#include "../backend/fused_attention.h"
#include "op_support.h"

namespace mantissa {
namespace {

// x [..., R, C] as [B, R, C] with the batch dimensions merged (a view where they merge).
Tensor as_3d(const Tensor& x) { return reshape(x, {-1, x.size(-2), x.size(-1)}); }

// The softmax's reduction dtype: f32, or f64 for f64 inputs.
DType score_dtype(DType inputs) { return inputs == DType::f64 ? DType::f64 : DType::f32; }

class AttentionNode final : public Node {
 public:
  AttentionNode(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, double scale, bool causal)
      : q_(save_for_backward(q)), k_(save_for_backward(k)), v_(save_for_backward(v)),
        probs_(save_for_backward(probs)), scale_(scale), causal_(causal) {}
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
    run_kernel_on<kernel::AttentionSoftmaxBackward>(probs_, as_3d(probs_), as_3d(grad_probs), scale_, causal_,
                                                          as_3d(grad_scores));
    return {detail::batched_product(grad_scores, k_, Tensor(), dtype),
            detail::batched_product(transpose(grad_scores, -1, -2), q_, Tensor(), dtype),
            detail::batched_product(transpose(probs_, -1, -2), g, Tensor(), dtype)};
  }

 private:
  Tensor q_, k_, v_, probs_;
  double scale_;
  bool causal_;
};

// x [B, T, parts * H * D] seen as [parts, B, H, T, D] (a view, no copy).
Tensor head_major_view(const Tensor& x, std::int64_t parts, std::int64_t heads) {
  const std::int64_t nb = x.size(0), t = x.size(1), width = x.size(2), d = width / parts / heads;
  return make_view(x, {parts, nb, heads, t, d}, {width / parts, t * width, d, width, 1}, x.offset());
}

// Part i of a contiguous [parts, B * H, T, D] tensor as [B * H, T, D], or transposed ([B * H, D, T]).
Tensor part(const Tensor& x, std::int64_t i, bool transposed = false) {
  const std::int64_t bh = x.size(1), t = x.size(2), d = x.size(3);
  const std::int64_t off = x.offset() + i * bh * t * d;
  return transposed ? make_view(x, {bh, d, t}, {t * d, 1, d}, off) : make_view(x, {bh, t, d}, {t * d, d, 1}, off);
}

// [B * H, R, C] transposed to [B * H, C, R] (a view).
Tensor transposed(const Tensor& x) { return transpose(x, 1, 2); }

// The output's gradient [B, T, C] as [1, B * H, T, D], head-major like the saved q, k, v.
Tensor head_major_gradient(const Tensor& g_in, std::int64_t batch, std::int64_t heads, DType dtype, Device device) {
  const std::int64_t t = g_in.size(1), d = g_in.size(2) / heads;
  const Tensor g = Tensor::empty({1, batch * heads, t, d}, dtype, device);
  run_kernel<kernel::Copy>(device, head_major_view(contiguous(cast(g_in, dtype)), 1, heads),
                           reshape(g, {1, batch, heads, t, d}));
  return g;
}

// q's, k's and v's gradients [3, B * H, T, D] as one gradient of the fused projection [B, T, 3 C].
Tensor fused_projection_gradient(const Tensor& grad_heads, const Shape& qkv_shape, std::int64_t batch, std::int64_t heads) {
  const std::int64_t t = grad_heads.size(2), d = grad_heads.size(3);
  const Tensor grad_qkv = Tensor::empty(qkv_shape, grad_heads.dtype(), grad_heads.device());
  run_kernel<kernel::Copy>(grad_heads.device(), reshape(grad_heads, {3, batch, heads, t, d}),
                           head_major_view(grad_qkv, 3, heads));
  return grad_qkv;
}

class SelfAttentionNode final : public Node {
 public:
  SelfAttentionNode(const Tensor& heads, const Tensor& probs, std::int64_t batch, double scale, bool causal)
      : heads_(save_for_backward(heads)), probs_(save_for_backward(probs)), batch_(batch), scale_(scale),
        causal_(causal) {}
  std::string_view name() const override { return "self_attention"; }
  void release() override { heads_ = probs_ = {}; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    const DType dtype = heads_.dtype();
    const std::int64_t nb = batch_, h = heads_.size(1) / nb;
    const Device device = heads_.device();
    const Tensor g = head_major_gradient(g_in, nb, h, dtype, device);
    // dP = g v^T (f32), dS = scale P (dP - rowsum(dP P)); dq = dS k, dk = dS^T q, dv = P^T g.
    const Tensor grad_probs = Tensor::empty(probs_.shape(), score_dtype(dtype), probs_.device());
    run_kernel<kernel::Matmul>(device, part(g, 0), part(heads_, 2, true), Tensor(), grad_probs);
    const Tensor grad_scores = Tensor::empty(probs_.shape(), dtype, probs_.device());
    run_kernel<kernel::AttentionSoftmaxBackward>(device, probs_, grad_probs, scale_, causal_, grad_scores);
    const Tensor grad_heads = Tensor::empty(heads_.shape(), dtype, heads_.device());
    run_kernel<kernel::Matmul>(device, grad_scores, part(heads_, 1), Tensor(), part(grad_heads, 0));
    run_kernel<kernel::Matmul>(device, transposed(grad_scores), part(heads_, 0), Tensor(), part(grad_heads, 1));
    run_kernel<kernel::Matmul>(device, transposed(probs_), part(g, 0), Tensor(), part(grad_heads, 2));
    return {fused_projection_gradient(grad_heads, inputs[0].shape, nb, h)};
  }

 private:
  Tensor heads_, probs_;  // q, k, v as [3, B * H, T, D]; the probabilities [B * H, T, T]
  std::int64_t batch_;
  double scale_;
  bool causal_;
};

// Rows r0..r1 of every matrix of a [B * H, R, C] view; the first `cols` columns of one.
Tensor rows(const Tensor& x, std::int64_t r0, std::int64_t r1) {
  return make_view(x, {x.size(0), r1 - r0, x.size(2)}, x.strides(), x.offset() + r0 * x.strides()[1]);
}
Tensor first_columns(const Tensor& x, std::int64_t cols) {
  return make_view(x, {x.size(0), x.size(1), cols}, x.strides(), x.offset());
}

// A block of query rows [t0, t1) and the keys it sees: causal, the first t1 (the attention softmax's
// causal rule for a block of T rows against S keys, j <= i + S - T, is then row t0 + i seeing j <= t0 + i).
struct QueryBlock {
  std::int64_t t0, t1, keys;
};
std::vector<QueryBlock> query_blocks(std::int64_t t, std::int64_t block, bool causal) {
  std::vector<QueryBlock> blocks;
  for (std::int64_t t0 = 0; t0 < t; t0 += block) {
    const std::int64_t t1 = std::min(t, t0 + block);
    blocks.push_back({t0, t1, causal ? t1 : t});
  }
  return blocks;
}

// One block's probabilities [B * H, rows, keys] in `dtype`, from q and k [B * H, T, D] (head-major).
Tensor block_probs(const QueryBlock& b, const Tensor& q, const Tensor& k, double scale, bool causal, DType dtype) {
  const Device device = q.device();
  const Tensor scores = Tensor::empty({q.size(0), b.t1 - b.t0, b.keys}, score_dtype(dtype), device);
  run_kernel<kernel::Matmul>(device, rows(q, b.t0, b.t1), first_columns(transposed(k), b.keys), Tensor(), scores);
  const Tensor probs = Tensor::empty(scores.shape(), dtype, device);
  run_kernel<kernel::AttentionSoftmax>(device, scores, scale, causal, probs);
  return probs;
}

class BlockedSelfAttentionNode final : public Node {
 public:
  BlockedSelfAttentionNode(const Tensor& heads, std::int64_t batch, double scale, bool causal, std::int64_t block)
      : heads_(save_for_backward(heads)), batch_(batch), scale_(scale), causal_(causal), block_(block) {}
  std::string_view name() const override { return "self_attention"; }
  void release() override { heads_ = {}; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    const DType dtype = heads_.dtype();
    const std::int64_t nb = batch_, h = heads_.size(1) / nb, t = heads_.size(2), d = heads_.size(3);
    const Device device = heads_.device();
    const Tensor g = head_major_gradient(g_in, nb, h, dtype, device);
    const Tensor q = part(heads_, 0), k = part(heads_, 1), v = part(heads_, 2), go = part(g, 0);
    const Tensor grad_heads = Tensor::empty(heads_.shape(), dtype, device);
    // dk and dv gather a term from every block that sees their row: added into f32 sums by the products,
    // rounded once at the end.
    const Tensor sums = Tensor::zeros({2, nb * h, t, d}, score_dtype(dtype), device);
    const Tensor dk = part(sums, 0), dv = part(sums, 1);
    for (const QueryBlock& b : query_blocks(t, block_, causal_)) {
      // dP = g v^T (f32), dS = scale P (dP - rowsum(dP P)); dq = dS k, dk += dS^T q, dv += P^T g.
      const Tensor probs = block_probs(b, q, k, scale_, causal_, dtype);
      const Tensor g_rows = rows(go, b.t0, b.t1);
      const Tensor grad_probs = Tensor::empty(probs.shape(), score_dtype(dtype), device);
      run_kernel<kernel::Matmul>(device, g_rows, first_columns(transposed(v), b.keys), Tensor(), grad_probs);
      const Tensor grad_scores = Tensor::empty(probs.shape(), dtype, device);
      run_kernel<kernel::AttentionSoftmaxBackward>(device, probs, grad_probs, scale_, causal_, grad_scores);
      run_kernel<kernel::Matmul>(device, grad_scores, rows(k, 0, b.keys), Tensor(), rows(part(grad_heads, 0), b.t0, b.t1));
      run_kernel<kernel::MatmulAccumulate>(device, transposed(grad_scores), rows(q, b.t0, b.t1), rows(dk, 0, b.keys));
      run_kernel<kernel::MatmulAccumulate>(device, transposed(probs), g_rows, rows(dv, 0, b.keys));
    }
    run_kernel<kernel::Copy>(device, dk, part(grad_heads, 1));
    run_kernel<kernel::Copy>(device, dv, part(grad_heads, 2));
    return {fused_projection_gradient(grad_heads, inputs[0].shape, nb, h)};
  }

 private:
  Tensor heads_;  // q, k, v as [3, B * H, T, D]
  std::int64_t batch_;
  double scale_;
  bool causal_;
  std::int64_t block_;
};

// A device's fused kernel: it saves the input itself (q, k and v side by side), the output and the
// softmax's statistics, and its backward is one call too.
class FusedSelfAttentionNode final : public Node {
 public:
  FusedSelfAttentionNode(const detail::FusedAttention& fused, const Tensor& qkv, const Tensor& out, const Tensor& stats,
                         std::int64_t heads, bool causal, double scale)
      : fused_(fused), qkv_(save_for_backward(qkv)), out_(save_for_backward(out)), stats_(save_for_backward(stats)),
        heads_(heads), causal_(causal), scale_(scale) {}
  std::string_view name() const override { return "self_attention"; }
  void release() override { qkv_ = out_ = stats_ = {}; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    const Tensor g = contiguous(cast(g_in, qkv_.dtype()));
    const Tensor grad_qkv = Tensor::empty(qkv_.shape(), qkv_.dtype(), qkv_.device());
    fused_.backward(qkv_, out_, g, stats_, heads_, causal_, scale_, grad_qkv);
    return {grad_qkv};
  }

 private:
  const detail::FusedAttention& fused_;
  Tensor qkv_, out_, stats_;
  std::int64_t heads_;
  bool causal_;
  double scale_;
};

// Query rows per block when the caller leaves it to the op: the whole sequence on the CPU (its batched
// products are fastest on whole head matrices, and its sequences are short); 128 on a GPU for sequences
// past 256, where [B * H, T, T] probabilities per layer would be most of a step's memory.
std::int64_t query_block_rows(std::int64_t asked, std::int64_t t, Device device) {
  if (asked > 0) return std::min(asked, t);
  return device.type != DeviceType::cpu && t > 256 ? 128 : t;
}

}  // namespace

Tensor self_attention(const Tensor& qkv_in, std::int64_t heads, bool causal, std::int64_t query_block) {
  const KernelRegion region("attention");
  detail::check_computable(qkv_in, "self_attention");
  if (qkv_in.dim() != 3 || heads <= 0 || qkv_in.size(2) % (3 * heads) != 0) {
    throw std::invalid_argument("self_attention: qkv [B, T, 3 C] with C a multiple of " + std::to_string(heads) +
                                " heads expected, got " + shape_str(qkv_in.shape()));
  }
  if (query_block < 0) throw std::invalid_argument("self_attention: query_block must be 0 (automatic) or positive");
  const Tensor qkv = contiguous(detail::autocast_input(qkv_in, AutocastOp::attention));
  const DType dtype = qkv.dtype();
  const std::int64_t nb = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3, h = heads, d = c / h;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const Device device = qkv.device();
  // The device's fused kernel where it takes this case (the automatic query block only: a block asked
  // for is the composition's).
  const detail::FusedAttention* fused = query_block == 0 && qkv.numel() > 0 ? detail::fused_attention(device.type) : nullptr;
  std::string not_fused;
  if (fused != nullptr && fused->supports(qkv, h, causal, scale, not_fused)) {
    const Tensor out = Tensor::empty({nb, t, c}, dtype, device);
    const Tensor stats = Tensor::empty({nb, h, t}, DType::f32, device);
    {
      NoGradGuard no_grad;
      fused->forward(qkv, h, causal, scale, out, stats);
    }
    if (needs_grad({&qkv})) {
      record(out, std::make_shared<FusedSelfAttentionNode>(*fused, qkv, out.detach(), stats, h, causal, scale), {&qkv});
    }
    return out;
  }
  // q, k, v copied once into head-major order: each head one contiguous matrix, which oneDNN's fast
  // batched kernels need (with the heads read in place it fell back to a 4x slower kernel).
  const Tensor qkv_heads = Tensor::empty({3, nb * h, t, d}, dtype, qkv.device());
  const Tensor out_heads = Tensor::empty({1, nb * h, t, d}, dtype, qkv.device());
  const Tensor out = Tensor::empty({nb, t, c}, dtype, qkv.device());
  const std::int64_t block = query_block_rows(query_block, t, device);
  Tensor probs;  // kept for backward when the sequence is one block
  {
    NoGradGuard no_grad;
    run_kernel<kernel::Copy>(device, head_major_view(qkv, 3, h), reshape(qkv_heads, {3, nb, h, t, d}));
    for (const QueryBlock& b : query_blocks(t, block, causal)) {
      const Tensor p = block_probs(b, part(qkv_heads, 0), part(qkv_heads, 1), scale, causal, dtype);
      run_kernel<kernel::Matmul>(device, p, rows(part(qkv_heads, 2), 0, b.keys), Tensor(),
                                 rows(part(out_heads, 0), b.t0, b.t1));
      if (block >= t) probs = p;
    }
    run_kernel<kernel::Copy>(device, reshape(out_heads, {1, nb, h, t, d}), head_major_view(out, 1, h));
  }
  if (needs_grad({&qkv})) {
    if (block < t) {
      record(out, std::make_shared<BlockedSelfAttentionNode>(qkv_heads, nb, scale, causal, block), {&qkv});
    } else {
      if (!probs.defined()) probs = Tensor::empty({nb * h, t, t}, dtype, device);  // an empty sequence
      record(out, std::make_shared<SelfAttentionNode>(qkv_heads, probs, nb, scale, causal), {&qkv});
    }
  }
  return out;
}

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
  // The products are attention's for autocast: low precision in a region, f32 where asked.
  const Tensor q0 = detail::autocast_input(q_in, AutocastOp::attention);
  const Tensor k0 = detail::autocast_input(k_in, AutocastOp::attention);
  const Tensor v0 = detail::autocast_input(v_in, AutocastOp::attention);
  const DType dtype = detail::promote(detail::promote(q0.dtype(), k0.dtype()), v0.dtype());
  const Tensor q = cast(q0, dtype), k = cast(k0, dtype), v = cast(v0, dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor probs, out;
  {
    NoGradGuard no_grad;
    const Tensor scores = detail::batched_product(q, transpose(k, -1, -2), Tensor(), score_dtype(dtype));
    probs = Tensor::empty(scores.shape(), dtype, scores.device());
    run_kernel_on<kernel::AttentionSoftmax>(q, as_3d(scores), scale, causal, as_3d(probs));
    out = detail::batched_product(probs, v, Tensor(), dtype);
  }
  if (needs_grad({&q, &k, &v})) record(out, std::make_shared<AttentionNode>(q, k, v, probs, scale, causal), {&q, &k, &v});
  return out;
}

}  // namespace mantissa
