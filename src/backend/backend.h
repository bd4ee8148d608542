// The kernels a device provides. Op front-ends (src/ops/) check arguments, decide output shapes and
// dtypes, allocate outputs and record autograd; then they call these kernels on the backend of the
// tensors' device. A CUDA backend is a new folder implementing this interface; the front-ends do not
// change.
//
// Kernel contract: inputs and outputs are strided views with the shapes the comment gives (broadcast
// inputs are expanded views with stride 0); every output element is written. Arithmetic on f16/bf16
// is done in f32 and rounded once to the output dtype (f64 tensors compute in f64).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mantissa/core/tensor.h"
#include "mantissa/numeric/rounding.h"
#include "mantissa/ops/op_types.h"

namespace mantissa::detail {

// Hyperparameters of one fused optimizer update (PyTorch's algorithms; see src/optim/).
struct SgdStep {
  double lr, momentum, weight_decay;
  bool nesterov;
  bool first;  // the momentum buffer starts as the first gradient (PyTorch)
};
struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: decay the weight directly instead of adding it to the gradient
  std::int64_t step;  // 1-based, for bias correction
};

struct GradientCheck {
  std::int64_t nonfinite = 0;
  double sum_squares = 0;
  std::int64_t underflow = 0;
  std::int64_t count = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // dst = src, converting dtypes (rounding to nearest even); same shape.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // out = op(a, b); a, b and out have out's shape.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = op(x; alpha).
  virtual void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) = 0;
  // grad_x = grad_y * op'(x; alpha).
  virtual void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y,
                              const Tensor& grad_x) = 0;
  // out = reduction of x over `axes` (sorted); out has x's rank with those axes of size 1.
  virtual void reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out) = 0;
  // out[b] = a[b] . w[b] (+ bias): a [B, M, K], w [B, K, N], out [B, M, N], bias [N] or undefined;
  // products summed in f32 (f64 for f64), the bias added before the one rounding.
  virtual void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) = 0;
  // Softmax (or log-softmax) over the last axis; x and y [R, C]; computed in f32.
  virtual void softmax(const Tensor& x, const Tensor& y, bool log) = 0;
  // grad_x from y = softmax(x) (or log-softmax) and grad_y; all [R, C].
  virtual void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) = 0;
  // Attention probabilities from scores [B, T, S] (f32, or f64): probs [B, T, S] (any float dtype) =
  // softmax over the last axis of scale * scores, computed in f32 (f64 for f64). Causal: row i sees
  // columns j <= i + S - T, the others get probability 0 (a row that sees none is NaN, as 0 / 0).
  virtual void attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs) = 0;
  // grad_scores [B, T, S] (in its dtype) = scale * probs * (grad_probs - sum_j grad_probs * probs), from
  // probs and grad_probs [B, T, S] (grad_probs f32 or f64). Causal: only the columns each row sees are
  // read (the others of grad_probs may be unwritten); the others get 0.
  virtual void attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                          const Tensor& grad_scores) = 0;

  // Cross-entropy per row of logits [N, C] (read in its dtype, computed in f32): probs [N, C] f32 gets
  // softmax(logits), kept for backward; losses [N] f32 gets -sum_c w_c log p_c with w the targets mixed
  // with the uniform distribution by `smoothing`, 0 for rows whose target is ignore_index.
  virtual void cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                             double smoothing, const Tensor& probs, const Tensor& losses) = 0;
  // grad_logits [N, C] = (probs - w) * grad_losses[row] (0 for ignored rows).
  virtual void cross_entropy_backward(const Tensor& probs, std::span<const std::int64_t> targets,
                                      std::int64_t ignore_index, double smoothing, const Tensor& grad_losses,
                                      const Tensor& grad_logits) = 0;

  // One pass over a gradient, in place: g *= factor (in f32, rounded once into g's dtype), counting
  // non-finite values, summing squares of the finite results (f64 accumulation) and counting values
  // that are non-zero but smaller in magnitude than `underflow_below` before the multiplication (0: none).
  virtual GradientCheck scale_and_check(const Tensor& g, double factor, double underflow_below) = 0;

  // Optimizer updates, in place, contiguous tensors of one shape: param f32 (or f64), grad any compute
  // dtype, state tensors f32 or bf16 (read and written rounding to nearest even). Computed in f32 (f64
  // for f64 parameters).
  virtual void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                          const SgdStep& s) = 0;
  virtual void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                           const AdamStep& s) = 0;
  // dst = src (f32, contiguous, same shape) rounded into dst's dtype with the given rounding; stochastic
  // rounding draws from (seed, element index).
  virtual void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed) = 0;

  // Layer norm over the last axis, in f32: x, y [R, C]; gamma, beta [C]; mean, rstd [R] f32 (kept for
  // backward; rstd = 1 / sqrt(var + eps)).
  virtual void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd) = 0;
  // grad_x [R, C]; grad_gamma, grad_beta [C] f32 (summed over rows); eps as in the forward.
  virtual void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                   const Tensor& grad_beta, double eps) = 0;

  // out [n, D] = rows ids[i] of weight [V, D] (ids checked by the front-end).
  virtual void embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) = 0;
  // grad_weight [V, D] f32, zeroed by the caller: row ids[i] += grad_out[i].
  virtual void embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out,
                                  const Tensor& grad_weight) = 0;

  // Contiguous NCHW: x [N, C, H, W], w [O, C / groups, KH, KW], out [N, O, OH, OW]; f32 accumulation.
  virtual void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) = 0;
  virtual void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                                    const Tensor& grad_x) = 0;
  virtual void conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p,
                                       const Tensor& grad_w) = 0;

  // Contiguous NCHW pooling; the backward of max pooling sends each gradient to the first maximum.
  virtual void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) = 0;
  virtual void pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p,
                               const Tensor& grad_x) = 0;

  // Batch norm in training mode over x [N, C, S] (contiguous; S spatial positions): per-channel batch
  // mean and rstd = 1 / sqrt(biased var + eps) into mean, rstd [C] f32; y = (x - mean) rstd gamma + beta.
  virtual void batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd) = 0;
  // grad_x [N, C, S]; grad_gamma, grad_beta [C] f32.
  virtual void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                   const Tensor& grad_beta) = 0;
};

// The backend that runs ops on tensors of this device (the CPU's: reference or oneDNN, see
// mantissa/ops/backend_select.h).
Backend& backend_for(Device device);

Backend& reference_backend();
Backend& cpu_backend();

}  // namespace mantissa::detail
