// The CPU backend's kernels, one file per family. f64 tensors never reach them: the backend sends f64
// to the reference loops (oneDNN has no f64, and f64 exists for checks).
#pragma once

#include <cstdint>
#include <span>

#include "../kernels.h"
#include "mantissa/core/tensor.h"
#include "mantissa/core/op_types.h"

namespace mantissa::detail {

// cpu_elementwise.cpp: f32 compute over row segments, rounded once into the output dtype.
void cpu_copy(const Tensor& src, const Tensor& dst);
void cpu_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void cpu_unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out);
// cpu_unary and x rounded into `kept` in the same pass (one read of x).
void cpu_unary_keeping_input(UnaryOp op, double alpha, const Tensor& x, const Tensor& out, const Tensor& kept);
void cpu_unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x);

// cpu_onednn_eltwise.cpp: oneDNN for contiguous f32/bf16 operands of one dtype; false when not taken.
bool onednn_unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out);
bool onednn_unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x);
bool onednn_softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log);

// cpu_onednn_norm.cpp: layer norm on oneDNN (contiguous f32/bf16, f32 gamma and beta); false when not taken.
bool onednn_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
bool onednn_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                const Tensor& grad_beta, double eps);

// cpu_elementwise.cpp: the loss scaler's fused pass (in place).
GradientCheck cpu_scale_and_check(std::span<const Tensor> gradients, double factor, double underflow_below, const Tensor& totals);
NumericsStats cpu_numerics(const Tensor& x, double factor, std::span<const double> limits);

// cpu_optim.cpp: fused optimizer updates and master-weight write-back.
void cpu_sgd_update(std::span<const ParamUpdate> list, const SgdStep& s, const WriteBack& w);
void cpu_adam_update(std::span<const ParamUpdate> list, const AdamStep& s, const WriteBack& w);
void cpu_round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed);

// cpu_reduce.cpp: f32 accumulation.
void cpu_reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out);

// cpu_softmax.cpp: over rows, in f32.
void cpu_softmax(const Tensor& x, const Tensor& y, bool log);
void cpu_softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log);

// cpu_attention.cpp: scale, causal mask and softmax of attention scores in one f32 pass.
void cpu_attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs);
void cpu_attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                    const Tensor& grad_scores);

// cpu_cross_entropy.cpp: fused softmax and loss, f32.
void cpu_cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                       double smoothing, const Tensor& losses);
void cpu_cross_entropy_backward(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                                double smoothing, const Tensor& grad_losses, const Tensor& grad_logits, const Tensor& losses);
// cpu_lstm.cpp: the LSTM cell's pointwise part, f32.
void cpu_lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev, const Tensor& out,
                   const Tensor& acts);
void cpu_lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& grad_h, const Tensor& grad_c,
                            const Tensor& grad_gates, const Tensor& grad_c_prev);

// cpu_norm.cpp: f32 over rows.
void cpu_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd);
void cpu_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                             const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                             const Tensor& grad_beta);

// cpu_embedding.cpp: row gathers and the scatter-add backward, f32.
void cpu_embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out);
void cpu_embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight);

// cpu_conv.cpp: oneDNN; a dtype it lacks here through f32 on converted blocked operands.
void cpu_conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out);
void cpu_conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x);
void cpu_conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w);

// cpu_pool.cpp: f32 loops.
void cpu_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out);
void cpu_pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x);

// cpu_batch_norm.cpp: over (image, channel) planes in f32, statistics in f64.
void cpu_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd);
void cpu_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                             const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                             const Tensor& grad_beta);

// cpu_matmul.cpp: oneDNN; f16 (which oneDNN lacks on CPUs without f16 arithmetic) blockwise in f32.
void cpu_matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out);
void cpu_matmul_accumulate(const Tensor& a, const Tensor& w, const Tensor& out);
void cpu_matmul_row_sums(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& sums);
void cpu_matmul_gelu(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& pre, const Tensor& out);
void cpu_matmul_gelu_backward(const Tensor& a, const Tensor& w, const Tensor& pre, const Tensor& out);
// out = scale * (a . w) + bias (FP8's descaled product), the scale and the bias applied in f32.
// Operands bf16 or fp8 (widened to bf16: scaled_operands.h).
void cpu_scaled_matmul(const Tensor& a, const Tensor& w, const ProductScale& scale, const Tensor& bias, const Tensor& out);

// cpu_fp8.cpp: the FP8 quantizer (out contiguous bf16) and block amax.
void cpu_fp8_amax(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax);
void cpu_hadamard_rows(const Tensor& x, std::uint16_t signs, const Tensor& out);
Fp8QuantizeStats cpu_block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale,
                                    const Tensor& out, const Tensor& counts, const Tensor& factor);
Fp8QuantizeStats cpu_fp8_quantize(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                                  std::int64_t block_cols, bool dequantize, const Tensor& out);
Fp8QuantizeStats cpu_fp8_quantize_current(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols,
                                          int margin, bool power_of_2, bool dequantize, const Tensor& scales,
                                          const Tensor& out);

}  // namespace mantissa::detail
