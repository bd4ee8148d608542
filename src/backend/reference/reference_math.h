// The reference backend's elementwise functions and their derivatives, in double, written from the
// textbook definitions and on their own: the CPU backend has its own forms (cpu/unary_math.h, shaped for
// f32 vector loops), so a formula mistake in either shows up in the parity tests, and
// tests/unit/reference_math_test.cpp checks these against definitions in long double.
#pragma once

#include <cmath>
#include <numbers>

#include "mantissa/core/op_types.h"

namespace mantissa::detail::reference {

// The logistic function, in the form that does not overflow for either sign of x.
inline double logistic(double x) {
  if (x >= 0) return 1 / (1 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1 + e);
}

// The standard normal distribution function Phi and density phi (Phi(x) = erfc(-x / sqrt 2) / 2, exact
// to double precision for negative x too).
inline double normal_cdf(double x) { return std::erfc(-x / std::numbers::sqrt2) / 2; }
inline double normal_pdf(double x) { return std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi); }

// u of GPT-2's GELU, x (1 + tanh u) / 2: sqrt(2 / pi) (x + 0.044715 x^3).
inline double gelu_tanh_argument(double x) { return std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x); }

inline double unary(UnaryOp op, double x, double alpha) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::abs: return x < 0 ? -x : x == 0 ? 0.0 : x;  // NaN stays NaN
    case UnaryOp::add_scalar: return x + alpha;
    case UnaryOp::mul_scalar: return x * alpha;
    case UnaryOp::pow_scalar: return std::pow(x, alpha);
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::relu: return x > 0 || std::isnan(x) ? x : 0.0;  // relu(NaN) is NaN, relu(-0) is +0
    case UnaryOp::gelu: return x * normal_cdf(x);
    case UnaryOp::silu: return x * logistic(x);
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return logistic(x);
    case UnaryOp::gelu_tanh: return x * logistic(2 * gelu_tanh_argument(x));  // (1 + tanh u) / 2 = logistic(2u)
  }
  return x;
}

// The gradient reaching x from g through y = unary(op, x): g dy/dx, except relu, which passes g where
// x > 0 and 0 elsewhere even when g is inf or NaN (PyTorch's rule).
inline double unary_gradient(UnaryOp op, double x, double g, double alpha) {
  switch (op) {
    case UnaryOp::neg: return -g;
    case UnaryOp::abs: return x > 0 ? g : x < 0 ? -g : 0.0 * g;
    case UnaryOp::add_scalar: return g;
    case UnaryOp::mul_scalar: return g * alpha;
    case UnaryOp::pow_scalar: return g * alpha * std::pow(x, alpha - 1);
    case UnaryOp::exp: return g * std::exp(x);
    case UnaryOp::log: return g / x;
    case UnaryOp::sqrt: return g / (2 * std::sqrt(x));
    case UnaryOp::relu: return x > 0 ? g : 0.0;
    case UnaryOp::gelu: return g * (normal_cdf(x) + x * normal_pdf(x));
    case UnaryOp::silu: {
      const double s = logistic(x);
      return g * (s + x * s * (1 - s));
    }
    case UnaryOp::tanh: {
      const double c = std::cosh(x);
      return g / (c * c);  // sech^2; 1 / inf = 0 far out
    }
    case UnaryOp::sigmoid: {
      const double s = logistic(x);
      return g * s * (1 - s);
    }
    case UnaryOp::gelu_tanh: {
      const double s = logistic(2 * gelu_tanh_argument(x));
      const double du = std::sqrt(2 / std::numbers::pi) * (1 + 3 * 0.044715 * x * x);
      return g * (s + x * 2 * s * (1 - s) * du);
    }
  }
  return g;
}

inline double binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::eq: return a == b ? 1.0 : 0.0;
  }
  return a;
}

}  // namespace mantissa::detail::reference
