// Reference kernels kept out of reference_backend.cpp to keep files small; the backend class calls them.
#pragma once

#include <span>

#include "mantissa/core/tensor.h"

namespace mantissa::detail {

void reference_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd);
void reference_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                   const Tensor& grad_beta);
void reference_embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out);
void reference_embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight);

}  // namespace mantissa::detail
