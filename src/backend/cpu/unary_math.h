// The CPU backend's unary and binary functions and their derivatives, as templates its f32 loops
// vectorize. The reference backend writes the same functions its own way (reference/reference_math.h),
// so parity compares two independent versions; the gradient checks verify the derivatives against finite
// differences. The CUDA backend compiles these same templates for the GPU (MANTISSA_HOST_DEVICE).
#pragma once

#include <bit>
#include <cmath>
#include <numbers>
#include <type_traits>

#include "../../numeric/host_device.h"
#include "mantissa/core/op_types.h"

namespace mantissa::detail {

template <class T>
MANTISSA_HOST_DEVICE inline T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// exp(y) for f32 y <= 0, inlined so that a loop calling it vectorizes without a call per vector (libmvec's
// expf cost as much as the rest of GELU): y = k ln 2 + r with |r| <= ln 2 / 2 (k rounded by adding and
// subtracting 1.5 2^23, which needs the IEEE order the library is built with, never -ffast-math; ln 2 in
// two f32 parts, so r keeps its digits), exp(r) = 1 + r + r^2 P(r) with P of degree 4 (least squares
// reweighted to the minimax relative error: 0.08 of f32's ulps with its f32 coefficients), times 2^k
// in two steps so that results down to the subnormals round once. Within 1 ulp of exp on every f32 in
// [-104, 0] (measured against expl on every third one); below -104 it gives 0 (exp(-104) is under half
// the smallest subnormal); NaN stays NaN. The GPU has its own fast exp.
MANTISSA_HOST_DEVICE inline float exp_of_nonpositive(float y_in) {
#ifdef __CUDA_ARCH__
  return std::exp(y_in);
#else
  const float y = y_in < -104.0f ? -104.0f : y_in;
  const float kf = (y * 0x1.715476p0f + 0x1.8p23f) - 0x1.8p23f;  // k = y / ln 2 rounded to an integer
  float r = std::fma(kf, -0x1.62e43p-1f, y);
  r = std::fma(kf, 0x1.05c61p-29f, r);
  float p = 0x1.6a1a70p-10f;
  p = std::fma(p, r, 0x1.123fc6p-7f);
  p = std::fma(p, r, 0x1.555916p-5f);
  p = std::fma(p, r, 0x1.55548ap-3f);
  p = std::fma(p, r, 0x1.fffffcp-2f);
  p = std::fma(p, r * r, r) + 1.0f;
  const int k = static_cast<int>(kf);  // in [-150, 0]: 2^(k + 64) is normal
  return p * std::bit_cast<float>((k + 64 + 127) << 23) * 0x1p-64f;
#endif
}

// exp(-x^2 / 2), with x^2 split by an fma into its rounded value h and the rounding's error l, exp(-h / 2)
// corrected by (1 - l / 2): the rounding of x^2 alone would move the result by up to x^2 / 4 of its ulps.
// |x| is capped at 40, where the value is already 0 even in f64, so that inf gives 0, not inf - inf.
template <class T>
MANTISSA_HOST_DEVICE inline T gaussian_of(T x_in) {
  const T x = std::fabs(x_in) > T(40) ? T(40) : x_in;  // NaN stays NaN
  const T h = x * x;
  const T l = std::fma(x, x, -h);
  T e;
  if constexpr (std::is_same_v<T, float>) {
    e = exp_of_nonpositive(-0.5f * h);
  } else {
    e = std::exp(T(-0.5) * h);
  }
  return std::fma(e, T(-0.5) * l, e);
}

// GELU's Phi(x), the normal distribution function, and its density phi(x) = gaussian_of(x) / sqrt(2 pi),
// from one exp. Phi(x) = erfc(t) / 2 for x <= 0 and 1 - erfc(t) / 2 for x > 0, t = |x| / sqrt 2 (the form
// 0.5 (1 + erf(x / sqrt 2)) cancels for negative x), and erfc(t) = exp(-t^2) f(t) with exp(-t^2) =
// gaussian_of(x): f(t) = exp(t^2) erfc(t) is smooth and falls from 1 to 0.05 over t in [0, 10.5] (beyond,
// exp(-t^2) is under f32's smallest subnormal), and a degree-10 polynomial in q = (t - 2) / (t + 2), q in
// [-1, 0.68], has it within 0.11 of f32's ulps (a least-squares fit reweighted towards the minimax
// relative error, coefficients rounded to f32). In f32, x Phi(x) is within 10 ulps of its value on every
// 13th f32 in [-15, 15] (against erfcl), in the tail too, where glibc's erfcf lost x^2 of its ulps to the
// rounding of t (CpuMath.TheErfGeluKeepsItsDigitsWithoutTheArgumentsAllowance); the whole vectorized
// GELU loop takes about half of what erfcf alone took, and the gradient reuses the exp. Other types
// use std::erfc.
//
// For f32 x: exp(-x^2 / 2) and f(t) / 2, whose product is erfc(t) / 2.
struct GaussAndHalfF {
  float gauss, half_f;
};
MANTISSA_HOST_DEVICE inline GaussAndHalfF gauss_and_half_f_of(float x) {
  const float a = std::fabs(x) * float(std::numbers::sqrt2 / 2);
  const float t = a < 10.5f ? a : 10.5f;  // NaN stays NaN
  const float q = (t - 2.0f) / (t + 2.0f);
  float f = 0x1.af6830p-16f;
  f = std::fma(f, q, 0x1.1f4a62p-13f);
  f = std::fma(f, q, 0x1.18bb80p-15f);
  f = std::fma(f, q, -0x1.f80d5ap-11f);
  f = std::fma(f, q, -0x1.b8f69cp-11f);
  f = std::fma(f, q, 0x1.ca3a32p-8f);
  f = std::fma(f, q, 0x1.e92p-9f);
  f = std::fma(f, q, -0x1.437e5ep-4f);
  f = std::fma(f, q, 0x1.eeea86p-3f);
  f = std::fma(f, q, -0x1.b57036p-2f);
  f = std::fma(f, q, 0x1.058672p-2f);
  return {gaussian_of(x), 0.5f * f};
}

template <class T>
struct NormalCdf {
  T cdf, density;
};
template <class T>
MANTISSA_HOST_DEVICE inline NormalCdf<T> normal_cdf_of(T x) {
  constexpr T kDensity = T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  if constexpr (std::is_same_v<T, float>) {
    const GaussAndHalfF g = gauss_and_half_f_of(x);
    const float tail = g.half_f * g.gauss;  // erfc(t) / 2
    return {x > 0.0f ? 1.0f - tail : tail, g.gauss * kDensity};
  } else {
    return {T(0.5) * std::erfc(-x * T(std::numbers::sqrt2 / 2)), gaussian_of(x) * kDensity};
  }
}

// x Phi(x). In f32 for x <= 0 as (x f(t) / 2) exp(-x^2 / 2): the one small factor last, so that a
// result in the subnormals is rounded once there (erfc(t) / 2 first would underflow to 0 from x = -14.2,
// where x Phi(x) is still 4 subnormal steps).
template <class T>
MANTISSA_HOST_DEVICE inline T gelu_of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const GaussAndHalfF g = gauss_and_half_f_of(x);
    return x > 0.0f ? x * (1.0f - g.half_f * g.gauss) : (x * g.half_f) * g.gauss;
  } else {
    return x * normal_cdf_of(x).cdf;
  }
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
    case UnaryOp::gelu: return gelu_of(x);
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
      const NormalCdf<T> n = normal_cdf_of(x);
      return n.cdf + x * n.density;
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
