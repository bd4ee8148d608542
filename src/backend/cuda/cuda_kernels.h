// The CUDA backend's kernels, with the signatures of kernels.h; cuda_backend.cu registers them for
// Impl::cuda. Each runs on the backend's stream and returns without waiting, except where it returns
// a value computed on the GPU (scale_and_check, once for the whole list of gradients), which it waits for.
#pragma once

#include <string>

#include "../kernels.h"
#include "../profiler.h"

namespace mantissa::detail::cuda {

// cuda_elementwise.cu
void copy(const Tensor& src, const Tensor& dst);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out);
void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x);
GradientCheck scale_and_check(std::span<const Tensor> gradients, double factor, double underflow_below, const Tensor& totals);

// cuda_optim.cu
void sgd_update(std::span<const ParamUpdate> list, const SgdStep& s, const WriteBack& w);
void adam_update(std::span<const ParamUpdate> list, const AdamStep& s, const WriteBack& w);
void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed);

// cuda_rows.cu
void softmax(const Tensor& x, const Tensor& y, bool log);
void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log);
void attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs);
void attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                const Tensor& grad_scores);
void cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index, double smoothing,
                   const Tensor& losses);
void cross_entropy_backward(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                            double smoothing, const Tensor& grad_losses, const Tensor& grad_logits,
                            const Tensor& losses);
void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y, const Tensor& mean,
                const Tensor& rstd);
void add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& s,
                    const Tensor& y, const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& grad_y,
                         const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta, double eps);

// cuda_reduce.cu
void reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out);
void embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out);
void embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight);

// cuda_matmul.cu
void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out);
void matmul_accumulate(const Tensor& a, const Tensor& w, const Tensor& out);
void matmul_row_sums(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& sums);
void matmul_gelu(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& pre, const Tensor& out);
void matmul_gelu_backward(const Tensor& a, const Tensor& w, const Tensor& pre, const Tensor& out);
void scaled_matmul(const Tensor& a, const Tensor& w, const ProductScale& scale, const Tensor& bias, const Tensor& out);

// cuda_fp8.cu
void fp8_amax(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax);
Fp8QuantizeStats fp8_quantize(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                              std::int64_t block_cols, bool dequantize, const Tensor& out);
Fp8QuantizeStats fp8_quantize_current(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols,
                                      int margin, bool power_of_2, bool dequantize, const Tensor& scales, const Tensor& out);
// BlockQuantize: the fit rule (FP8's delayed, current and block recipes) by the two kernels above; the
// microscaled rules by the CPU's own scale rules, in three kernels.
Fp8QuantizeStats block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale, const Tensor& out,
                                const Tensor& counts, const Tensor& factor);
void hadamard_rows(const Tensor& x, std::uint16_t signs, const Tensor& out);

// cuda_pool.cu
void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out);
void pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x);

// cuda_batch_norm.cu
void batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y, const Tensor& mean,
                const Tensor& rstd);
void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& grad_y,
                         const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta);

// cuda_numerics.cu
NumericsStats numerics(const Tensor& x, double factor, std::span<const double> limits);

// cuda_lstm.cu
void lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev, const Tensor& out, const Tensor& acts);
void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& grad_h, const Tensor& grad_c,
                        const Tensor& grad_gates, const Tensor& grad_c_prev);

// cuda_conv.cu (builds whose CUDA toolkit has cudnn.h: MANTISSA_WITH_CUDNN)
void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out);
void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x);
void conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w);
// "9.19.0", loading cuDNN if it is not yet; throws when it cannot be loaded.
std::string cudnn_version();

// cuda_runtime.cu: the allocator is registered when the library is loaded; this makes sure the linker
// keeps the file that does it.
void keep_allocator_registration();

// The GPU's clock around kernels for device kernel timing (cuda_kernel_clock.cu).
DeviceKernelClock kernel_clock();

// cuDNN's fused attention as the CUDA backend's FusedAttention (cuda_attention.cu), and what cuda_info()
// says of it.
void register_fused_attention();
std::string fused_attention_summary();

}  // namespace mantissa::detail::cuda
