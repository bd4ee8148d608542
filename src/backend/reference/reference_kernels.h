// The reference kernels of the families with files of their own (reference_<family>.cpp, named as the
// ops' and the CPU kernels' files), which reference_backend.cpp registers with its own; and the one the
// CPU backend calls directly for the strided views its own loop does not take.
#pragma once

#include <span>

#include "mantissa/core/tensor.h"
#include "../kernels.h"

namespace mantissa::detail {

GradientCheck reference_scale_and_check(const Tensor& g, double factor, double underflow_below);
// reference_numerics.cpp; tally_value adds one value (already multiplied by the factor) to the stats.
NumericsStats reference_numerics(const Tensor& x, double factor, std::span<const double> limits);
void tally_value(double v, std::span<const double> limits, NumericsStats& s);

// reference_norm.cpp
void reference_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd);
void reference_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                   const Tensor& grad_beta);
// reference_loss.cpp
void reference_cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                             double smoothing, const Tensor& losses);
void reference_cross_entropy_backward(const Tensor& logits, std::span<const std::int64_t> targets,
                                      std::int64_t ignore_index, double smoothing, const Tensor& grad_losses,
                                      const Tensor& grad_logits, const Tensor& losses);
// reference_attention.cpp
void reference_attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs);
void reference_attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                          const Tensor& grad_scores);
// reference_embedding.cpp
void reference_embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out);
void reference_embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight);

// reference_lstm.cpp
void reference_lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev, const Tensor& out,
                         const Tensor& acts);
void reference_lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& grad_h, const Tensor& grad_c,
                                  const Tensor& grad_gates, const Tensor& grad_c_prev);
// reference_conv.cpp
void reference_conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out);
void reference_conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x);
void reference_conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w);
// reference_pool.cpp: forward (out defined) or backward (grad_out, grad_x given, out undefined).
void reference_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor* grad_out,
                      const Tensor* grad_x);
// reference_norm.cpp
void reference_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd);
void reference_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                   const Tensor& grad_beta);
// reference_fp8.cpp
void reference_fp8_amax(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax);
void reference_hadamard_rows(const Tensor& x, std::uint16_t signs, const Tensor& out);
Fp8QuantizeStats reference_block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale,
                                          const Tensor& out, const Tensor& counts, const Tensor& factor);
Fp8QuantizeStats reference_fp8_quantize(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                                        std::int64_t block_cols, bool dequantize, const Tensor& out);
Fp8QuantizeStats reference_fp8_quantize_current(const Tensor& x, Format format, std::int64_t block_rows,
                                                std::int64_t block_cols, int margin, bool power_of_2, bool dequantize,
                                                const Tensor& scales, const Tensor& out);
void reference_scaled_matmul(const Tensor& a, const Tensor& w, const ProductScale& scale, const Tensor& bias,
                             const Tensor& out);

}  // namespace mantissa::detail
