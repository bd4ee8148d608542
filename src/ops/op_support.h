// What every op front-end needs: dtype promotion, broadcasting, axis handling, and run_kernel_on, which
// runs a kernel on the device of a tensor (src/backend/registry.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../backend/registry.h"
#include "../core/channels_last.h"
#include "mantissa/autograd/node.h"
#include "mantissa/core/tensor.h"

namespace mantissa::detail {

// Throws std::invalid_argument naming the op if x is undefined or of a storage-only dtype (fp8).
void check_computable(const Tensor& x, const char* op);
// The dtype of a binary op's result: the wider input; f16 with bf16 gives f32.
DType promote(DType a, DType b);
// The broadcast of two shapes (numpy rules); throws naming the op if they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// axis in [-rank, rank) to [0, rank); throws naming the op otherwise.
std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const char* op);
// Sorted, unique, normalized axes; empty means all.
std::vector<int> normalize_axes(const std::vector<std::int64_t>& axes, std::int64_t rank, const char* op);

// Output size of a sliding window along one axis (convolution, pooling): throws naming the op when the
// window (dilated) does not fit the padded input or the stride is not positive.
std::int64_t window_out_size(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                             std::int64_t dilation, const char* op);

// a [..., M, K] . b [..., K, N] (or b [K, N] shared by every batch) + bias [N], a and b of one dtype,
// the result in out_dtype (the inputs' or f32); no autocast, no history (src/ops/matmul.cpp).
Tensor batched_product(const Tensor& a, const Tensor& b, const Tensor& bias, DType out_dtype);
// A matrix [M, N] as a batch of one [1, M, N] view, for the product kernels (src/ops/matmul.cpp).
Tensor one_batch(const Tensor& m);
// Records out = a + b (a and b of out's shape), computed by a kernel that did more, as add() records it:
// the history of a sum made inside a fused kernel (src/ops/elementwise.cpp).
void record_add(const Tensor& out, const Tensor& a, const Tensor& b);
// A linear layer's parameter gradients from its output gradient g2 [R, out] and input x2 [R, in]: dW =
// g2^T x2 [out, in] where `weight`, db = g2's column sums [out] where `bias` (both in one pass over g2
// where the device can), each undefined where not asked for (src/ops/matmul.cpp).
std::pair<Tensor, Tensor> linear_parameter_gradients(const Tensor& g2, const Tensor& x2, bool weight, bool bias);

// Channels-last activations (src/core/channels_last.h): whether a convolution over x makes its output
// channels-last (the CPU's oneDNN backend, in a dtype oneDNN convolves: its convolutions then read and
// write activations with no reorder, and batch norm, the elementwise ops and max pooling keep the
// layout); and x itself where it is laid out so, else a copy (with its history).
bool channels_last_activations(const Tensor& x);
Tensor to_channels_last(const Tensor& x);

}  // namespace mantissa::detail

namespace mantissa {
// The op front-ends run kernels as run_kernel_on<kernel::Matmul>(a, ...).
namespace kernel = detail::kernel;
using detail::run_kernel;
using detail::run_kernel_on;
}  // namespace mantissa
