// The families of elementwise and reduction ops, shared by the op front-ends and the backends.
#pragma once

#include <cstdint>

namespace mantissa {

enum class BinaryOp : std::uint8_t {
  add,
  sub,
  mul,
  div,
  eq,  // 1 where a == b, else 0 (no gradient)
};

// Unary ops with an optional scalar parameter alpha.
enum class UnaryOp : std::uint8_t {
  neg,         // -x
  abs,
  add_scalar,  // x + alpha
  mul_scalar,  // x * alpha
  pow_scalar,  // x ^ alpha
  exp,
  log,
  sqrt,
  relu,
  gelu,  // x * Phi(x), the exact (erf) form
  silu,  // x * sigmoid(x)
  tanh,
  sigmoid,
  gelu_tanh,  // x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2: GPT-2's GELU (PyTorch's approximate='tanh')
};

enum class ReduceOp : std::uint8_t { sum, mean, max };

// 2-D convolution geometry (PyTorch's conventions: padding on both sides, dilation 1 is dense).
struct Conv2dParams {
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
};

// 2-D pooling geometry. Average pooling divides by the full window, padding included (PyTorch's
// count_include_pad = true); max pooling ignores padding.
struct Pool2dParams {
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 2, stride_w = 2;
  std::int64_t pad_h = 0, pad_w = 0;
  bool max = true;
};

}  // namespace mantissa
