// The kernels, one entry each: its name, the family a step's time breakdown counts it under, its
// signature, and its contract. Op front-ends (src/ops/) check arguments, decide output shapes and dtypes,
// allocate outputs and record autograd; then they run a kernel with run_kernel<K>(device, ...)
// (registry.h), which finds the implementation registered for the device. Each backend registers what
// it implements (reference/: all of them, the oracle; cpu/: all of them; a CUDA backend: what it has, in
// files of its own); a kernel a device lacks is an error naming both.
//
// Kernel contract: inputs and outputs are strided views with the shapes the comment gives (broadcast
// inputs are expanded views with stride 0); every output element is written. Arithmetic on f16/bf16
// is done in f32 and rounded once to the output dtype (f64 tensors compute in f64).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "../numeric/host_device.h"
#include "mantissa/core/tensor.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/numeric/rounding.h"
#include "mantissa/core/op_types.h"

namespace mantissa::detail {

// Hyperparameters of one fused optimizer update (PyTorch's algorithms; see src/optim/). grad_scale
// multiplies each gradient value (in f32, inside the update) before anything else uses it: the inverse
// loss scale times the clipping factor, so a scaled gradient is unscaled without a pass of its own.
struct SgdStep {
  double lr, momentum, weight_decay;
  bool nesterov;
  double grad_scale = 1;
};
struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: decay the weight directly instead of adding it to the gradient
  std::int64_t step;  // 1-based, for bias correction
  double grad_scale = 1;
};

// What one FP8 quantization saw: the largest finite magnitude of its input, and how many values it
// clipped (finite, past the format's range, saturated to its largest), lost (non-zero, rounded to zero)
// and found not finite.
struct Fp8QuantizeStats {
  double amax = 0;
  std::int64_t saturated = 0, underflowed = 0, nonfinite = 0, count = 0;
  double tensor_scale = 1;  // BlockQuantize: the scale its values are to be multiplied by (NVFP4's f32 level)
};

// A quantizer's counts as it leaves them in device memory for its caller to read later, with other
// values, in one wait (BlockQuantize's `counts`; core/batched_reads.h): 32 bytes, the same layout on
// every backend. amax_bits: the f32 pattern of the largest finite magnitude (the microscaled rules':
// NaN if any value is NaN).
struct Fp8Counts {
  std::uint64_t saturated = 0, underflowed = 0, nonfinite = 0;
  std::uint32_t amax_bits = 0, unused = 0;
};
static_assert(sizeof(Fp8Counts) == 32);
// The stats of `count` values from their counts (tensor_scale left at 1).
inline Fp8QuantizeStats stats_of(const Fp8Counts& c, std::int64_t count) {
  return {.amax = std::bit_cast<float>(c.amax_bits), .saturated = static_cast<std::int64_t>(c.saturated),
          .underflowed = static_cast<std::int64_t>(c.underflowed), .nonfinite = static_cast<std::int64_t>(c.nonfinite),
          .count = count};
}
// The counts of stats (amax as f32: every amax is the magnitude of an f32 or bf16 value, or NaN).
inline Fp8Counts counts_of(const Fp8QuantizeStats& st) {
  return {.saturated = static_cast<std::uint64_t>(st.saturated), .underflowed = static_cast<std::uint64_t>(st.underflowed),
          .nonfinite = static_cast<std::uint64_t>(st.nonfinite), .amax_bits = std::bit_cast<std::uint32_t>(static_cast<float>(st.amax))};
}

// What the numerics telemetry and the non-finite tracer see of a tensor (kernel::Numerics).
inline constexpr int kLog2Lowest = -160;  // bin 0 of the log2 histogram: magnitudes in [2^-160, 2^-159)
inline constexpr int kLog2Bins = 290;     // up to [2^129, 2^130): every f32 and every f32 times 2^+-30
struct NumericsStats {
  std::int64_t count = 0, zeros = 0, nonfinite = 0;
  double amax = 0;                                 // the largest finite magnitude
  std::array<std::int64_t, kLog2Bins> log2 = {};  // non-zero finite values by floor(log2 |v|)
  std::vector<std::int64_t> above;                 // finite values with |v| > each of the limits asked for
};

struct GradientCheck {
  std::int64_t nonfinite = 0;
  double sum_squares = 0;
  std::int64_t underflow = 0;
  std::int64_t count = 0;

  GradientCheck& operator+=(const GradientCheck& o) {
    nonfinite += o.nonfinite;
    sum_squares += o.sum_squares;
    underflow += o.underflow;
    count += o.count;
    return *this;
  }
};

// The gradient pass's totals as it leaves them in device memory for its caller to read later
// (ScaleAndCheck's `totals`): 32 bytes, the same layout on every backend.
struct CheckTotals {
  std::uint64_t nonfinite = 0, underflow = 0;
  double sum_squares = 0;
  std::uint64_t unused = 0;
};
static_assert(sizeof(CheckTotals) == 32);
// The check of `count` values from its totals.
inline GradientCheck check_of(const CheckTotals& t, std::int64_t count) {
  return {.nonfinite = static_cast<std::int64_t>(t.nonfinite), .sum_squares = t.sum_squares,
          .underflow = static_cast<std::int64_t>(t.underflow), .count = count};
}

// The scale that fits a block whose largest finite magnitude is amax into the format: (max finite / amax)
// / 2^margin in f32, or with power_of_2 the largest power of 2 not above that, kept within 2^-100..2^100
// (every value scaled back stays an f32 normal); 1 for a block with no non-zero finite value.
// (The second form takes the format's largest finite value, for loops over many blocks. ilogb is
// floor(log2) exactly, for every positive finite double. The first form runs on the GPU too: current
// scaling's scales are made there, from amax that never leaves it.)
MANTISSA_HOST_DEVICE inline float fp8_scale_for(double amax, double max_finite, int margin, bool power_of_2) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1.0f;
  const double fit = max_finite / amax;
  if (power_of_2) return std::ldexp(1.0f, std::clamp(std::ilogb(fit) - margin, -100, 100));
  return static_cast<float>(std::min(fit / std::ldexp(1.0, margin), static_cast<double>(std::numeric_limits<float>::max())));
}
inline float fp8_scale_for(double amax, Format format, int margin, bool power_of_2) {
  return fp8_scale_for(amax, static_cast<double>(decode(format, format.max_finite_bits())), margin, power_of_2);
}

// What a scaled product multiplies its sums by: alpha times the factors its operands' quantizers left on
// their device (BlockQuantize's `factor`: an f64 in 8 bytes each; undefined for 1), multiplied in f64 in
// that order and rounded to f32 once. The factors stay where they were made: a GPU reads them in its own
// kernels, so the host never waits for a scale it does not need.
struct ProductScale {
  ProductScale(double alpha_ = 1, Tensor a = Tensor(), Tensor w = Tensor())  // NOLINT: a plain alpha converts
      : alpha(alpha_), a_factor(std::move(a)), w_factor(std::move(w)) {}
  double alpha;
  Tensor a_factor, w_factor;
  bool on_device() const { return a_factor.defined() || w_factor.defined(); }
};

// The bytes of the distinct values a view holds (a broadcast dimension, stride 0, counts once); 0 for an
// undefined or empty tensor. What a kernel moves at least, per argument: run_kernel counts it (registry.h).
inline std::int64_t held_bytes(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  auto n = static_cast<std::int64_t>(dtype_size(t.dtype()));
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.strides()[static_cast<std::size_t>(d)] != 0) n *= t.shape()[static_cast<std::size_t>(d)];
  }
  return n;
}
// A kernel that reads a tensor and writes it back (in place) moves its bytes twice.
inline double read_and_written(const Tensor& t) { return 2.0 * static_cast<double>(held_bytes(t)); }
// The bytes of `rows` rows of t's last dimension (the rows an embedding reads or updates).
inline double rows_bytes(const Tensor& t, std::size_t rows) {
  return static_cast<double>(rows) * static_cast<double>(t.size(-1)) * static_cast<double>(dtype_size(t.dtype()));
}

// One parameter of an optimizer update, all its tensors contiguous and of one shape: `param` its f32
// (or f64) values, updated in place; `grad` any compute dtype; `state` f32 or bf16 (read and written
// rounding to nearest even): SGD's momentum buffer (undefined without momentum; `first`: it starts as
// this gradient, as PyTorch's), Adam's m and v; `low`, if defined, a low-precision parameter whose f32
// master `param` is: its new values are written into it, rounded, in the same pass.
struct ParamUpdate {
  Tensor param{}, grad{};
  std::array<Tensor, 2> state{};
  Tensor low{};
  bool first = false;

  std::array<const Tensor*, 5> tensors() const { return {&param, &grad, &state[0], &state[1], &low}; }
  double bytes() const {
    double sum = static_cast<double>(held_bytes(grad)) + static_cast<double>(held_bytes(low));
    for (const Tensor* t : {&param, &state[0], &state[1]}) sum += read_and_written(*t);
    return sum;
  }
};
// How new master values reach `low`: the rounding, and stochastic rounding's seed (its bits drawn from
// (seed, element index), as RoundInto draws them).
struct WriteBack {
  Rounding rounding = Rounding::nearest_even;
  std::uint64_t seed = 0;
};
inline double update_bytes(std::span<const ParamUpdate> list) {
  double sum = 0;
  for (const ParamUpdate& u : list) sum += u.bytes();
  return sum;
}

namespace kernel {

// Views: dst = src, converting dtypes (rounding to nearest even); same shape.
struct Copy {
  static constexpr const char* name = "copy";
  static const char* family_of(const Tensor& src, const Tensor& dst) {
    return src.dtype() == dst.dtype() ? "copy" : "cast";
  }
  using Fn = void(const Tensor& src, const Tensor& dst);
};

// Elementwise: out = op(a, b); a, b and out have out's shape.
struct Binary {
  static constexpr const char *name = "binary", *family = "elementwise";
  using Fn = void(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
};
// out = op(x; alpha).
struct Unary {
  static constexpr const char *name = "unary", *family = "elementwise";
  using Fn = void(UnaryOp op, double alpha, const Tensor& x, const Tensor& out);
};
// grad_x = grad_y * op'(x; alpha).
struct UnaryBackward {
  static constexpr const char *name = "unary_backward", *family = "elementwise";
  using Fn = void(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x);
};

// Reduction: out = reduction of x over `axes` (sorted); out has x's rank with those axes of size 1.
struct Reduce {
  static constexpr const char *name = "reduce", *family = "reduce";
  using Fn = void(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out);
};

// Matmul: out[b] = a[b] . w[b] (+ bias): a [B, M, K], w [B, K, N], out [B, M, N], bias [N] or undefined;
// products summed in f32 (f64 for f64), the bias added before the one rounding.
struct Matmul {
  static constexpr const char *name = "matmul", *family = "matmul";
  static double flops(const Tensor& a, const Tensor&, const Tensor&, const Tensor& out) {
    return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(-1));
  }
  using Fn = void(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out);
};
// A layer's weight and bias gradients in one pass over the output gradient: out = a . w as Matmul's
// (one matrix: a [1, M, K], w [1, K, N], out [1, M, N], no bias) and sums [M] = the row sums of a,
// sum_k a[m, k], in f32 rounded once (with a = g^T, the bias gradient). cuBLASLt's bias-gradient
// epilogue computes the sums while it reads a for the product.
struct MatmulRowSums {
  static constexpr const char *name = "matmul_row_sums", *family = "matmul";
  static double flops(const Tensor& a, const Tensor&, const Tensor& out, const Tensor&) {
    return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(-1));
  }
  using Fn = void(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& sums);
};
// GPT-2's MLP's first product with its GELU, in one pass: pre = a . w + bias as Matmul's (one matrix: a
// [1, M, K], w [1, K, N], bias [N] or undefined, pre [1, M, N]) and out [1, M, N] = gelu_tanh of that sum
// (f32, bias added) before its rounding, rounded once (cuBLASLt's GELU_AUX_BIAS epilogue: out is the
// activation, pre what the GELU's gradient reads).
struct MatmulGelu {
  static constexpr const char *name = "matmul_gelu", *family = "matmul";
  static double flops(const Tensor& a, const Tensor&, const Tensor&, const Tensor& pre, const Tensor&) {
    return 2.0 * static_cast<double>(pre.numel()) * static_cast<double>(a.size(-1));
  }
  using Fn = void(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& pre, const Tensor& out);
};
// The product a GELU's gradient follows (the MLP's second layer's input gradient): out = gelu_tanh'(pre)
// times a . w, the product summed in f32 and the whole rounded once (cuBLASLt's DGELU epilogue). One
// matrix: a [1, M, K], w [1, K, N], pre and out [1, M, N].
struct MatmulGeluBackward {
  static constexpr const char *name = "matmul_gelu_backward", *family = "matmul";
  static double flops(const Tensor& a, const Tensor&, const Tensor&, const Tensor& out) {
    return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(-1));
  }
  using Fn = void(const Tensor& a, const Tensor& w, const Tensor& pre, const Tensor& out);
};
// out[b] += a[b] . w[b], shapes as Matmul's: the products summed in f32 (f64 for f64), out's old value
// added to that sum, the result rounded once into out's dtype. Gradients gathered over blocks (a classifier's dw, attention's dk and dv) add
// into their sum in the product itself (cuBLASLt's beta = 1, oneDNN's sum post-op) instead of writing
// each block's term and adding it.
struct MatmulAccumulate {
  static constexpr const char *name = "matmul_accumulate", *family = "matmul";
  static double flops(const Tensor& a, const Tensor&, const Tensor& out) {
    return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(-1));
  }
  static double bytes(const Tensor& a, const Tensor& w, const Tensor& out) {
    return static_cast<double>(held_bytes(a) + held_bytes(w)) + read_and_written(out);
  }
  using Fn = void(const Tensor& a, const Tensor& w, const Tensor& out);
};

// Softmax (or log-softmax) over the last axis; x and y [R, C]; computed in f32.
struct Softmax {
  static constexpr const char *name = "softmax", *family = "softmax";
  using Fn = void(const Tensor& x, const Tensor& y, bool log);
};
// grad_x from y = softmax(x) (or log-softmax) and grad_y; all [R, C].
struct SoftmaxBackward {
  static constexpr const char *name = "softmax_backward", *family = "softmax";
  using Fn = void(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log);
};
// Cross-entropy per row of logits [N, C] (read in its dtype, computed in f32): losses [N] f32 gets
// -sum_c w_c log p_c, p = softmax(logits) and w the targets mixed with the uniform distribution by
// `smoothing`; 0 for rows whose target is ignore_index. No probabilities are written (backward
// recomputes them from the logits, which are half the size in bf16).
struct CrossEntropy {
  static constexpr const char *name = "cross_entropy", *family = "cross_entropy";
  using Fn = void(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                  double smoothing, const Tensor& losses);
};
// grad_logits [N, C] = (softmax(logits) - w) * grad_losses[row] (0 for ignored rows), the softmax
// recomputed from the logits in f32 (each probability an f32 value). grad_logits may be the logits
// tensor itself (overwritten: a classifier's block of logits becomes its gradient in place). losses,
// if defined, gets each row's loss from the same read of the logits, as CrossEntropy writes it.
struct CrossEntropyBackward {
  static constexpr const char *name = "cross_entropy_backward", *family = "cross_entropy";
  using Fn = void(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                  double smoothing, const Tensor& grad_losses, const Tensor& grad_logits, const Tensor& losses);
};

// Attention probabilities from scores [B, T, S] (f32, or f64): probs [B, T, S] (any float dtype) =
// softmax over the last axis of scale * scores, computed in f32 (f64 for f64). Causal: row i sees
// columns j <= i + S - T, the others get probability 0 (a row that sees none is NaN, as 0 / 0).
struct AttentionSoftmax {
  static constexpr const char *name = "attention_softmax", *family = "softmax";
  using Fn = void(const Tensor& scores, double scale, bool causal, const Tensor& probs);
};
// grad_scores [B, T, S] (in its dtype) = scale * probs * (grad_probs - sum_j grad_probs * probs), from
// probs and grad_probs [B, T, S] (grad_probs f32 or f64). Causal: only the columns each row sees are
// read (the others of grad_probs may be unwritten); the others get 0.
struct AttentionSoftmaxBackward {
  static constexpr const char *name = "attention_softmax_backward", *family = "softmax";
  using Fn = void(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal, const Tensor& grad_scores);
};

// Loss scaling: one pass over every gradient of the list (all on one device), in place: g *= factor (in
// f32, rounded once into g's dtype; a factor of 1 writes nothing), counting non-finite values, summing
// squares of the finite results (f64 accumulation) and counting values that are non-zero but smaller in
// magnitude than `underflow_below` before the multiplication (0: none); the totals are over the whole list.
// A whole step's gradients go in one call, so a device backend reads its totals back once a step.
// totals: undefined (returned whole, which on a GPU waits for the pass), or 32 zeroed bytes
// (CheckTotals) on the gradients' device that the totals are left in, for the caller to read later
// with the step's other values (core/batched_reads.h); only count comes back then.
struct ScaleAndCheck {
  static constexpr const char *name = "scale_and_check", *family = "loss_scaling";
  static double bytes(std::span<const Tensor> gradients, double factor, double, const Tensor&) {
    double sum = 0;
    for (const Tensor& g : gradients) sum += factor == 1 ? static_cast<double>(held_bytes(g)) : read_and_written(g);
    return sum;
  }
  using Fn = GradientCheck(std::span<const Tensor> gradients, double factor, double underflow_below, const Tensor& totals);
};

// Numerics: every value v of x (any layout) times factor, in f64: counted, zeros, non-finite, the largest
// finite |v|, the histogram of floor(log2 |v|) over the non-zero finite values (past either end: the end
// bin), and how many finite values have |v| > limits[i], for each i. Reads only.
struct Numerics {
  static constexpr const char *name = "numerics", *family = "telemetry";
  using Fn = NumericsStats(const Tensor& x, double factor, std::span<const double> limits);
};

// Optimizer updates of a list of parameters: one call a step (a GPU launches a few kernels for the whole
// list, not one per parameter). Computed in f32 (f64 for f64 parameters).
struct SgdUpdate {
  static constexpr const char *name = "sgd_update", *family = "optimizer";
  static double bytes(std::span<const ParamUpdate> list, const SgdStep&, const WriteBack&) { return update_bytes(list); }
  using Fn = void(std::span<const ParamUpdate> list, const SgdStep& s, const WriteBack& w);
};
struct AdamUpdate {
  static constexpr const char *name = "adam_update", *family = "optimizer";
  static double bytes(std::span<const ParamUpdate> list, const AdamStep&, const WriteBack&) { return update_bytes(list); }
  using Fn = void(std::span<const ParamUpdate> list, const AdamStep& s, const WriteBack& w);
};
// dst = src (f32, contiguous, same shape) rounded into dst's dtype with the given rounding; stochastic
// rounding draws from (seed, element index).
struct RoundInto {
  static constexpr const char *name = "round_into", *family = "optimizer";
  using Fn = void(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed);
};

// Layer norm over the last axis, in f32: x, y [R, C]; gamma, beta [C]; mean, rstd [R] f32 (kept for
// backward; rstd = 1 / sqrt(var + eps)). An f32 x with a narrower y (an output made for a product) gets
// the f32 result's bits rounded once into y: those of the f32 layer norm cast to y's dtype.
struct LayerNorm {
  static constexpr const char *name = "layer_norm", *family = "norm";
  using Fn = void(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd);
};
// The residual stream's sum and its layer norm in one pass: s = x + r, rounded into s's dtype, then
// LayerNorm of s exactly (the statistics of the rounded sums: the bits of the two kernels in a row). x,
// r, s and y [R, C]. A GPT block's layer norms each follow a residual add, which wrote s for the norm to
// read it back.
struct AddLayerNorm {
  static constexpr const char *name = "add_layer_norm", *family = "norm";
  using Fn = void(const Tensor& x, const Tensor& r, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& s,
                  const Tensor& y, const Tensor& mean, const Tensor& rstd);
};
// AddLayerNorm as the add and then the layer norm, for a backend without a fused kernel (or a call its
// fused kernel does not take): Add and Norm are the backend's Binary and LayerNorm kernels.
template <auto Add, auto Norm>
void add_then_layer_norm(const Tensor& x, const Tensor& r, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& s,
                         const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  Add(BinaryOp::add, x, r, s);
  Norm(s, gamma, beta, eps, y, mean, rstd);
}
// grad_x [R, C]; grad_gamma, grad_beta [C] f32 (summed over rows); eps as in the forward.
struct LayerNormBackward {
  static constexpr const char *name = "layer_norm_backward", *family = "norm";
  using Fn = void(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& grad_y,
                  const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta, double eps);
};
// Batch norm in training mode over x [N, C, S] (S spatial positions; contiguous, or channels-last, strides
// [S C, 1, C], where the ops give it so: src/core/channels_last.h; y and the gradients in x's layout):
// per-channel batch mean and rstd = 1 / sqrt(biased var + eps) into mean, rstd [C] f32;
// y = (x - mean) rstd gamma + beta.
struct BatchNorm {
  static constexpr const char *name = "batch_norm", *family = "norm";
  using Fn = void(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd);
};
// grad_x [N, C, S]; grad_gamma, grad_beta [C] f32.
struct BatchNormBackward {
  static constexpr const char *name = "batch_norm_backward", *family = "norm";
  using Fn = void(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& grad_y,
                  const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta);
};

// LSTM cell (PyTorch's gate order i, f, g, o): gates = x_gates + h_gates, both [B, 4H] in any dtype, summed
// in f32; i, f, o = sigmoid, g = tanh of their quarter; c = f c_prev + i g; h = o tanh(c). c_prev [B, H];
// out [2, B, H] gets h (out[0]) and c (out[1]) in its dtype (the state's); acts [B, 5H] f32 (f64 for
// f64) keeps i, f, g, o and tanh(c) for the backward.
struct LstmCell {
  static constexpr const char *name = "lstm_cell", *family = "lstm";
  using Fn = void(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev, const Tensor& out,
                  const Tensor& acts);
};
// From acts and c_prev as the forward left them and the gradients of h and c ([B, H] each): grad_gates
// [B, 4H] (the gradient of both gate inputs) and grad_c_prev [B, H], each in its own dtype.
struct LstmCellBackward {
  static constexpr const char *name = "lstm_cell_backward", *family = "lstm";
  using Fn = void(const Tensor& acts, const Tensor& c_prev, const Tensor& grad_h, const Tensor& grad_c,
                  const Tensor& grad_gates, const Tensor& grad_c_prev);
};

// Embedding: out [n, D] = rows ids[i] of weight [V, D] (ids checked by the front-end).
struct Embedding {
  static constexpr const char *name = "embedding", *family = "embedding";
  static double bytes(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) {
    return rows_bytes(weight, ids.size()) + static_cast<double>(held_bytes(out));  // the rows read, out written
  }
  using Fn = void(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out);
};
// grad_weight [V, D] f32, zeroed by the caller: row ids[i] += grad_out[i].
struct EmbeddingBackward {
  static constexpr const char *name = "embedding_backward", *family = "embedding";
  static double bytes(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) {
    return static_cast<double>(held_bytes(grad_out)) + 2 * rows_bytes(grad_weight, ids.size());  // rows updated
  }
  using Fn = void(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight);
};

// Convolution, contiguous NCHW (or, where the ops give them so, channels-last activations: the CPU's
// oneDNN backend in a dtype it convolves, src/core/channels_last.h): x [N, C, H, W], w [O, C / groups,
// KH, KW], out [N, O, OH, OW]; f32 accumulation. A pass's multiply-adds, twice: each output element sums (C / groups) x KH x KW products.
inline double conv_flops(const Tensor& out, const Tensor& w) {
  return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(w.numel() / w.size(0));
}
struct Conv2d {
  static constexpr const char *name = "conv2d", *family = "conv";
  static double flops(const Tensor&, const Tensor& w, const Conv2dParams&, const Tensor& out) { return conv_flops(out, w); }
  using Fn = void(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out);
};
struct Conv2dBackwardData {
  static constexpr const char *name = "conv2d_backward_data", *family = "conv";
  static double flops(const Tensor& grad_out, const Tensor& w, const Conv2dParams&, const Tensor&) {
    return conv_flops(grad_out, w);
  }
  using Fn = void(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x);
};
struct Conv2dBackwardWeights {
  static constexpr const char *name = "conv2d_backward_weights", *family = "conv";
  static double flops(const Tensor&, const Tensor& grad_out, const Conv2dParams&, const Tensor& grad_w) {
    return conv_flops(grad_out, grad_w);
  }
  using Fn = void(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w);
};

// Pooling, contiguous NCHW (2x2 max pooling: or channels-last, x, out and the gradients alike, where the
// ops give it so); the backward of max pooling sends each gradient to the first maximum.
struct Pool2d {
  static constexpr const char *name = "pool2d", *family = "pool";
  using Fn = void(const Tensor& x, const Pool2dParams& p, const Tensor& out);
};
struct Pool2dBackward {
  static constexpr const char *name = "pool2d_backward", *family = "pool";
  using Fn = void(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x);
};

// FP8 (ops/fp8.cpp). Blocks: x [R, C] is cut into blocks of block_rows x block_cols (the last ones
// shorter); scales and amax are [ceil(R / block_rows), ceil(C / block_cols)] f32, one value per block.
// amax = the largest finite |x| of each block (0 for a block with none).
struct Fp8Amax {
  static constexpr const char *name = "fp8_amax", *family = "fp8_cast";
  using Fn = void(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax);
};
// Current scaling in one kernel: each block's amax, its scale by fp8_scale_for() into scales, and the
// quantization as Fp8Quantize's (dequantize multiplies by 1 / scale). The stats' amax is the tensor's.
struct Fp8QuantizeCurrent {
  static constexpr const char *name = "fp8_quantize_current", *family = "fp8_cast";
  using Fn = Fp8QuantizeStats(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols, int margin,
                              bool power_of_2, bool dequantize, const Tensor& scales, const Tensor& out);
};
// out [R, C] = x * scale (the block's, in f32), rounded to `format` (e4m3 or e5m2) to nearest even;
// finite values past its range saturate to its largest finite value, inf and NaN stay as they are. The
// result is stored in bf16, which holds every fp8 value exactly, or in out's fp8 dtype (format's own,
// without `dequantize`: e4m3 has no infinity, so an infinite value is stored as its NaN); with
// `dequantize` it is multiplied by 1 / scale first (exact for the power-of-2 scales of block scaling).
struct Fp8Quantize {
  static constexpr const char *name = "fp8_quantize", *family = "fp8_cast";
  using Fn = Fp8QuantizeStats(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                              std::int64_t block_cols, bool dequantize, const Tensor& out);
};
// The one quantizer the ops call, every recipe a QuantSpec (mantissa/numeric/microscale.h):
// out [R, C] bf16 = x [R, C] (f32 or bf16) block-quantized as `spec` says and scaled back by its block
// scales, not by the tensor scale (returned in the stats: a product applies it to its result). bf16
// holds every such value exactly: an element (fp8, fp6 or fp4: at most 4 significant bits) times a power
// of 2, or an fp4 or fp6 element times an e4m3 scale (at most 8); per-tensor f32 scales leave the values
// on the fp8 grid, and for such a spec out may be that grid's storage dtype instead (e4m3 or e5m2: one
// byte a value, what an fp8 product reads; check_block_quantize_places in fit_quantize.h). Stochastic rounding draws from
// (seed, element index). given_scale: for a per-tensor spec, the scale to use (the delayed recipe's)
// instead of one fitted to x's amax; 0 for none. The fit rule runs as Fp8QuantizeCurrent / Fp8Quantize
// say (fit_quantize.h), the others as numeric/microscale.cpp defines them. counts: undefined (the stats
// come back whole, which on a GPU waits for the kernels), or 32 zeroed bytes (Fp8Counts) on x's device
// that the counts and the amax are left in, for the caller to read later; the stats then carry only
// count and tensor_scale. factor: undefined (tensor_scale returned; on a GPU, current scaling and NVFP4
// wait for the amax it needs), or 8 bytes on x's device that the tensor scale is written into, as an f64
// (1 / scale for a per-tensor fit, NVFP4's f32 level, 1 for the others; tensor_scale returned as 1), for
// a scaled product to read (ProductScale). With counts and factor both given the GPU is not waited for.
struct BlockQuantize {
  static constexpr const char *name = "block_quantize", *family = "fp8_cast";
  using Fn = Fp8QuantizeStats(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale, const Tensor& out,
                              const Tensor& counts, const Tensor& factor);
};
// NVFP4's random Hadamard transform along the rows: out [R, C] f32 (contiguous) = each group of 16 rows
// of x [R, C] (any float dtype, R a multiple of 16) mixed by H16 diag(signs) / 4, column by column
// (hadamard16 in numeric/microscale.h; the group's arithmetic is numeric/hadamard_rules.h's).
struct HadamardRows {
  static constexpr const char *name = "hadamard_rows", *family = "fp8_cast";
  using Fn = void(const Tensor& x, std::uint16_t signs, const Tensor& out);
};
// The FP8 product: out[b] = scale * (a[b] . w[b]) + bias, shapes as Matmul's; products summed in f32,
// the scale (ProductScale: the inverse of the operands' scales, as f32) and the bias applied in f32
// before the one rounding. Each operand is bf16 (block-scaled values, scaled back) or in an fp8 storage
// dtype, e4m3 or e5m2 (per-tensor scaled values, on that grid): the dtype says the grid. A device that
// multiplies fp8 in hardware takes such an operand as it is (one with its inner dimension contiguous
// without a copy); the others widen it to bf16 exactly (scaled_operands.h) and run the bf16 product.
struct ScaledMatmul {
  static constexpr const char *name = "scaled_matmul", *family = "matmul";
  static double flops(const Tensor& a, const Tensor&, const ProductScale&, const Tensor&, const Tensor& out) {
    return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(-1));
  }
  using Fn = void(const Tensor& a, const Tensor& w, const ProductScale& scale, const Tensor& bias, const Tensor& out);
};

}  // namespace kernel
}  // namespace mantissa::detail
