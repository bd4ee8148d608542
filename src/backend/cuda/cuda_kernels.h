// The CUDA backend's kernels, with the signatures of kernels.h; cuda_backend.cu registers them for
// Impl::cuda. Each runs on the backend's stream and returns without waiting, except where it returns
// a value computed on the GPU (scale_and_check, once for the whole list of gradients), which it waits for.
#pragma once

#include "../kernels.h"

namespace mantissa::detail::cuda {

// cuda_elementwise.cu
void copy(const Tensor& src, const Tensor& dst);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out);
void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x);
GradientCheck scale_and_check(std::span<const Tensor> gradients, double factor, double underflow_below);

// cuda_optim.cu
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamStep& s);
void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed);

// cuda_rows.cu
void softmax(const Tensor& x, const Tensor& y, bool log);
void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log);
void attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs);
void attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                const Tensor& grad_scores);
void cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index, double smoothing,
                   const Tensor& probs, const Tensor& losses);
void cross_entropy_backward(const Tensor& probs, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                            double smoothing, const Tensor& grad_losses, const Tensor& grad_logits);
void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y, const Tensor& mean,
                const Tensor& rstd);
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& grad_y,
                         const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta, double eps);

// cuda_reduce.cu
void reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out);
void embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out);
void embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight);

// cuda_matmul.cu
void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out);

// cuda_runtime.cu: the allocator is registered when the library is loaded; this makes sure the linker
// keeps the file that does it.
void keep_allocator_registration();

}  // namespace mantissa::detail::cuda
