// The CPU backend's unary and binary functions and their derivatives, as templates its f32 loops
// vectorize. The reference backend writes the same functions its own way (reference/reference_math.h),
// so parity compares two independent versions; the gradient checks verify the derivatives against finite
// differences. The CUDA backend compiles these same templates for the GPU (MANTISSA_HOST_DEVICE).
#pragma once

#include <cmath>
#include <numbers>

#include "../../numeric/host_device.h"
#include "mantissa/core/op_types.h"

namespace mantissa::detail {

template <class T>
MANTISSA_HOST_DEVICE inline T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Phi(x), the normal distribution function, as erfc(-x / sqrt 2) / 2: the form 0.5 (1 + erf(x / sqrt 2))
// cancels for negative x and loses most of its f32 digits there.
template <class T>
MANTISSA_HOST_DEVICE inline T gelu_cdf(T x) {
  return T(0.5) * std::erfc(-x * T(std::numbers::sqrt2 / 2));
}

// GPT-2's GELU: x (1 + tanh(u)) / 2 with u = sqrt(2 / pi) (x + 0.044715 x^3), and du/dx. Computed as
// x sigmoid(2u) = x / (1 + exp(-2u)), the same function: 1 + tanh(u) cancels for negative x (at x = -4,
// f32 keeps 2 of its digits), where exp(-2u) is large and exact to its last bits; dividing x by it
// directly keeps results down to 1e-37 that sigmoid(2u), a subnormal there, would flush to zero.
template <class T>
MANTISSA_HOST_DEVICE inline T gelu_tanh_u(T x) {
  return T(std::numbers::sqrt2 * std::numbers::inv_sqrtpi) * (x + T(0.044715) * x * x * x);
}
template <class T>
MANTISSA_HOST_DEVICE inline T gelu_tanh_du(T x) {
  return T(std::numbers::sqrt2 * std::numbers::inv_sqrtpi) * (T(1) + T(3 * 0.044715) * x * x);
}

template <class T>
MANTISSA_HOST_DEVICE inline T unary_value(UnaryOp op, T x, T alpha) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::abs: return std::fabs(x);
    case UnaryOp::add_scalar: return x + alpha;
    case UnaryOp::mul_scalar: return x * alpha;
    case UnaryOp::pow_scalar: return std::pow(x, alpha);
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::relu: return x > T(0) || x != x ? x : T(0);  // NaN stays NaN, as in PyTorch
    case UnaryOp::gelu: return x * gelu_cdf(x);
    case UnaryOp::silu: return x * sigmoid_of(x);
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return sigmoid_of(x);
    case UnaryOp::gelu_tanh: return x / (T(1) + std::exp(T(-2) * gelu_tanh_u(x)));  // x sigmoid(2u), no subnormal step
  }
  return x;
}

// d/dx of unary_value(op, x, alpha).
template <class T>
MANTISSA_HOST_DEVICE inline T unary_derivative(UnaryOp op, T x, T alpha) {
  switch (op) {
    case UnaryOp::neg: return T(-1);
    case UnaryOp::abs: return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
    case UnaryOp::add_scalar: return T(1);
    case UnaryOp::mul_scalar: return alpha;
    case UnaryOp::pow_scalar: return alpha * std::pow(x, alpha - T(1));
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return T(1) / x;
    case UnaryOp::sqrt: return T(0.5) / std::sqrt(x);
    case UnaryOp::relu: return x > T(0) ? T(1) : T(0);
    case UnaryOp::gelu: {
      const T cdf = gelu_cdf(x);
      const T pdf = std::exp(T(-0.5) * x * x) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
      return cdf + x * pdf;
    }
    case UnaryOp::silu: {
      const T s = sigmoid_of(x);
      return s * (T(1) + x * (T(1) - s));
    }
    case UnaryOp::tanh: {
      const T t = std::tanh(x);
      return T(1) - t * t;
    }
    case UnaryOp::sigmoid: {
      const T s = sigmoid_of(x);
      return s * (T(1) - s);
    }
    case UnaryOp::gelu_tanh: {  // with s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u): s + x 2 s (1 - s) du/dx
      const T e = std::exp(T(-2) * gelu_tanh_u(x));
      const T s = T(1) / (T(1) + e);
      const T rest = e > T(1) ? T(1) - s : e * s;  // 1 - s, without its cancellation where s is near 1
      return s + T(2) * x * s * rest * gelu_tanh_du(x);
    }
  }
  return T(0);
}

template <class T>
MANTISSA_HOST_DEVICE inline T binary_value(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::eq: return a == b ? T(1) : T(0);
  }
  return a;
}

// The gradient reaching x from g: g times the derivative, except relu, which passes g where x > 0 and
// 0 elsewhere even when g is inf or NaN (PyTorch's rule; 0 * inf, oneDNN's, would be NaN).
template <class T>
MANTISSA_HOST_DEVICE inline T unary_gradient(UnaryOp op, T x, T g, T alpha) {
  if (op == UnaryOp::relu) return x > T(0) ? g : T(0);
  return g * unary_derivative(op, x, alpha);
}

}  // namespace mantissa::detail
