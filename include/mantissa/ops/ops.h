// The ops on tensors. Each records autograd history when an input requires grad and recording is on;
// its backward rule is defined next to its forward in src/ops/.
//
// dtypes: f64, f32, f16 and bf16 compute (f16/bf16 in f32, rounded once); e4m3 and e5m2 are storage
// only and reach ops through cast(). Binary ops promote to the wider input (f16 with bf16 gives f32).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "mantissa/core/tensor.h"
#include "mantissa/core/op_types.h"

namespace mantissa {

class QuantState;  // mantissa/ops/fp8.h

// ---- Views and copies (src/ops/views.cpp)
// A view where the strides allow, else a copy; one dimension may be -1.
Tensor reshape(const Tensor& x, Shape shape);
Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1);
Tensor permute(const Tensor& x, std::vector<std::int64_t> dims);
// Elements start, start + step, ... below end along `dim` (negative start/end count from the end).
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1);
// A broadcast view: dimensions of size 1 (or missing in front) repeat to `shape` with stride 0.
Tensor expand(const Tensor& x, const Shape& shape);
// x itself if contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& x);
// A new contiguous tensor with x's values (no history).
Tensor contiguous_copy(const Tensor& x);
// Copies src's values into dst in place (converting dtypes, rounding to nearest even); no history.
// Throws if the shapes differ.
void copy_into(const Tensor& dst, const Tensor& src);
// x on `device` (a contiguous copy; x itself if it is there already); the backward brings the gradient
// back to x's device.
Tensor to_device(const Tensor& x, Device device);
// x converted to dtype, rounding to nearest even; the backward casts the gradient back.
Tensor cast(const Tensor& x, DType dtype);
Tensor concat(std::span<const Tensor> xs, std::int64_t dim);

// ---- Elementwise (src/ops/elementwise.cpp), with broadcasting
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor equal(const Tensor& a, const Tensor& b);  // 1 or 0, no gradient
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);
// GPT-2's GELU, the tanh approximation (PyTorch's gelu(x, approximate="tanh"); cuBLASLt's GELU epilogue).
Tensor gelu_tanh(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor unary(UnaryOp op, const Tensor& x, double alpha = 0);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }

// ---- Reductions (src/ops/reduction.cpp); accumulate in f32 (f64 for f64). Empty axes: all.
Tensor sum(const Tensor& x, std::vector<std::int64_t> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<std::int64_t> axes = {}, bool keepdim = false);
Tensor amax(const Tensor& x, std::vector<std::int64_t> axes = {}, bool keepdim = false);
// Variance with Bessel's correction `correction` (0: population variance).
Tensor variance(const Tensor& x, std::vector<std::int64_t> axes = {}, bool keepdim = false, int correction = 0);
// Sums a broadcast gradient back to `shape` (the inverse of expand).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- Matrix products (src/ops/matmul.cpp); products accumulate in f32 (f64 for f64)
// a [..., M, K] . b [..., K, N] (b may be [K, N] for any batch of a); output in the inputs' dtype.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] . w^T + bias, with w [out, in] and bias [out] (may be undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = {});
// A layer's product as its precision plan entry says: in FP8 by `fp8`'s recipe (mantissa/ops/fp8.h)
// where autocast runs the product in low precision, else as linear() (fp8 null: linear() itself).
// Autocast is asked once, here, for the weight: the FP8 decision and the cast both follow its answer.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, const std::shared_ptr<QuantState>& fp8);
// The dtype that linear(x, w, bias, fp8) reads an x of dtype `x` in, under the current autocast region:
// what its own cast would make of x (FP8 quantizes x as it comes). Likewise matmul's for its operand.
DType linear_input_dtype(DType x, DType w, bool fp8);
DType matmul_input_dtype(DType x);
DType linear_cross_entropy_input_dtype(DType x);
// GPT-2's MLP, linear(gelu_tanh(linear(x, fc_w, fc_b)), proj_w, proj_b), as one op (src/ops/gelu_mlp.cpp):
// the GELU is computed from the first product's f32 sum before that is rounded, and its gradient
// applied to the second product's input gradient before that is (on a GPU, cuBLASLt's GELU epilogues:
// no GELU pass in either direction). Both products run in the dtype autocast gives fc_w's product.
Tensor gelu_mlp(const Tensor& x, const Tensor& fc_w, const Tensor& fc_b, const Tensor& proj_w, const Tensor& proj_b);

// ---- Softmax (src/ops/softmax.cpp) and losses (src/ops/loss.cpp); computed in f32
Tensor softmax(const Tensor& x, std::int64_t axis = -1);
Tensor log_softmax(const Tensor& x, std::int64_t axis = -1);

enum class Reduction : unsigned char { mean, sum };
// logits [N, C], one class index per row; rows whose target is ignore_index count for nothing.
// Label smoothing eps mixes the one-hot target with the uniform distribution: (1 - eps) y + eps / C.
// The loss is an f32 scalar (f64 for f64 logits).
Tensor cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets,
                     Reduction reduction = Reduction::mean, std::int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// How linear_cross_entropy's backward gets the gradient of the [N, V] logits.
enum class ClassifierGradient : unsigned char {
  // On the CPU, recomputed (in one block unless row_block says otherwise: exactly the two ops); on a
  // GPU, kept.
  automatic,
  // Made in the forward pass in place of the logits, right after the losses (llm.c's fused
  // classifier), and kept ([N, V] in the logits' dtype, unscaled: softmax minus target); backward is
  // the two products of the linear layer, times the upstream gradient in f32.
  kept,
  // Nothing of [N, V] kept: the logits are made in blocks of row_block rows, turned into their losses
  // and dropped; backward makes each block again (one more product) and sums w's gradient in f32.
  recomputed,
};
// cross_entropy(matmul(x, w^T), targets, ...) for x [N, C] and a classifier's weight w [V, C], never
// holding f32 probabilities or logits. row_block 0 chooses: one block on the CPU, blocks of about 2^27
// logits on a GPU (evaluation, and training with recomputed gradients).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, std::span<const std::int64_t> targets,
                            Reduction reduction = Reduction::mean, std::int64_t ignore_index = -100,
                            double label_smoothing = 0.0, std::int64_t row_block = 0,
                            ClassifierGradient gradient = ClassifierGradient::automatic);
// Mean (or sum) of (a - b)^2 over all elements, in f32 (f64 for f64).
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);

// ---- Layers: layer norm (src/ops/norm.cpp), embedding (embedding.cpp), dropout (elementwise.cpp), attention (attention.cpp)
// Normalizes over the last axis in f32: (x - mean) / sqrt(var + eps) * gamma + beta, gamma and beta [C].
// The output has x's dtype.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);
// The same with the output made in `out_dtype`, rounded once from the f32 result: for an output that only
// a product reading that dtype uses (a GPT block's layer norms under autocast), the bits its own cast
// would make of the f32 output, without writing the f32 output and reading it back, and its gradient
// taken as it comes (the same bits as the cast's f32 gradient).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, DType out_dtype);
// The dtype layer_norm(x, ...) makes of an x of dtype `x`, under the current autocast region.
DType layer_norm_output_dtype(DType x);
// A residual sum and the layer norm of it, {add(x, r), layer_norm(add(x, r), gamma, beta, eps, out_dtype)}:
// the same values and history, the sum written and normalized in one pass (a GPT block's norms follow
// its residual adds). A residual that broadcasts into x runs as the two ops.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& gamma, const Tensor& beta, double eps,
                                         DType out_dtype);
// The dtype layer_norm would make of the sum x + r by itself (layer_norm_output_dtype of the sum's).
DType layer_norm_output_dtype(DType x, DType r);
// Rows of weight [V, D] picked by ids (each in [0, V)); the result has shape ids_shape + [D].
Tensor embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Shape& ids_shape);
// Zeroes each element with probability p and scales the rest by 1 / (1 - p); the mask comes from
// (seed, element index) alone, so it repeats on every machine and thread count. Identity unless training.
Tensor dropout(const Tensor& x, double p, std::uint64_t seed, bool training = true);
// softmax(q k^T / sqrt(D) [+ causal mask]) v for q [..., T, D], k [..., S, D], v [..., S, Dv]; the two
// products run in the inputs' dtype, the softmax in f32. Causal: position i sees keys j <= i + S - T.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true);
// Self-attention on a fused projection: qkv [B, T, 3 C] holds q, k and v ([B, T, C] each, in that order)
// for `heads` heads of C / heads features; returns [B, T, C], the heads side by side. The result of
// scaled_dot_product_attention on the heads, with one copy of q, k, v into head-major order, and one
// gradient for qkv (no slices, no zero-filled partial gradients to add up). query_block > 0 computes it
// in blocks of that many query rows, each against only the keys it sees, and backward recomputes each
// block's probabilities instead of keeping [B * H, T, T] of them; 0 chooses: one block on the CPU, 128
// rows on a GPU for sequences past 256.
Tensor self_attention(const Tensor& qkv, std::int64_t heads, bool causal = true, std::int64_t query_block = 0);

// One LSTM time step (src/ops/lstm.cpp): x_gates = x W_ih^T + b and h_gates = h W_hh^T, both [B, 4H] with
// PyTorch's gate order i, f, g, o, and the cell state c_prev [B, H] give [2, B, H]: h (index 0) and c
// (index 1), in the state's dtype (under autocast, f32: see AutocastOp::lstm_cell). Computed in f32.
Tensor lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev);
// ---- Convolution (src/ops/conv.cpp), pooling (pool.cpp), batch norm (norm.cpp), NCHW
// x [N, C, H, W], w [O, C / groups, KH, KW], bias [O] (may be undefined); output [N, O, OH, OW].
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv2dParams& p = {});
Tensor max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding = 0);
Tensor pool2d(const Tensor& x, const Pool2dParams& p);
// Batch norm over x [N, C, ...] per channel, in f32, output in x's dtype. Training: normalizes with the
// batch's statistics and updates running_mean and running_var (f32 [C]) in place with `momentum` (the
// unbiased variance, as PyTorch). Evaluation: normalizes with the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace mantissa
