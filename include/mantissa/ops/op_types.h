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
};

enum class ReduceOp : std::uint8_t { sum, mean, max };

}  // namespace mantissa
