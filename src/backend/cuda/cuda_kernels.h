// The CUDA backend's kernels, with the signatures of kernels.h; cuda_backend.cu registers them for
// Impl::cuda. Each runs on the backend's stream and returns without waiting, except where it returns
// a value computed on the GPU (scale_and_check), which it waits for.
#pragma once

#include "../kernels.h"

namespace mantissa::detail::cuda {

// cuda_elementwise.cu
void copy(const Tensor& src, const Tensor& dst);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out);
void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x);
GradientCheck scale_and_check(const Tensor& g, double factor, double underflow_below);

// cuda_optim.cu
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamStep& s);
void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed);

// cuda_matmul.cu
void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out);

// cuda_runtime.cu: the allocator is registered when the library is loaded; this makes sure the linker
// keeps the file that does it.
void keep_allocator_registration();

}  // namespace mantissa::detail::cuda
