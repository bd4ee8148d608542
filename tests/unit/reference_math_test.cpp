// The oracle checked against the textbook: the reference backend's unary functions and their
// derivatives, in f64, against definitions written here in long double (erf, exp, tanh straight from the
// formulas, derivatives by their closed forms). The reference's formulas (reference/reference_math.h) are
// written apart from the CPU backend's (cpu/unary_math.h), so parity compares two versions; this test
// checks the oracle itself, and the CPU's f32 functions (glibc's vector math, per ISA) against the same
// definitions per element, where parity's bounds are normwise.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

using Fn = std::function<long double(long double)>;

// The tolerance for an f64 result near `v`: `ulps` of it, or of 1 near zero.
double tolerance(long double v, double rel) { return rel * static_cast<double>(std::max(1.0L, std::fabs(v))); }

struct Definition {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  Fn value;
  Fn derivative;
};

long double sigmoid_ld(long double x) { return 1.0L / (1.0L + std::exp(-x)); }
long double phi(long double x) { return std::exp(-x * x / 2) / std::sqrt(2.0L * 3.14159265358979323846264338327950288L); }
long double gelu_u(long double x) { return std::sqrt(2 / 3.14159265358979323846264338327950288L) * (x + 0.044715L * x * x * x); }
long double Phi(long double x) { return 0.5L * std::erfc(-x / std::sqrt(2.0L)); }  // no cancellation for x < 0

std::vector<Definition> definitions() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](long double x) { return -x; }, [](long double) { return -1.0L; }},
      {"abs", [](const Tensor& x) { return abs(x); }, [](long double x) { return std::fabs(x); },
       [](long double x) { return x > 0 ? 1.0L : -1.0L; }},
      {"exp", [](const Tensor& x) { return exp(x); }, [](long double x) { return std::exp(x); },
       [](long double x) { return std::exp(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }, [](long double x) { return x > 0 ? x : 0.0L; },
       [](long double x) { return x > 0 ? 1.0L : 0.0L; }},
      {"gelu", [](const Tensor& x) { return gelu(x); }, [](long double x) { return x * Phi(x); },
       [](long double x) { return Phi(x) + x * phi(x); }},
      // GPT-2's: x (1 + tanh u) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3), with 1 + tanh u = 2 / (1 + e^-2u)
      // (no cancellation for negative x).
      {"gelu_tanh", [](const Tensor& x) { return gelu_tanh(x); },
       [](long double x) { return x / (1 + std::exp(-2 * gelu_u(x))); },
       [](long double x) {
         const long double t1 = 2 / (1 + std::exp(-2 * gelu_u(x)));  // 1 + tanh u
         const long double du = std::sqrt(2 / 3.14159265358979323846264338327950288L) * (1 + 3 * 0.044715L * x * x);
         return t1 / 2 + x / 2 * t1 * (2 - t1) * du;  // (1 + t) / 2 + x (1 - t^2) u' / 2
       }},
      {"silu", [](const Tensor& x) { return silu(x); }, [](long double x) { return x * sigmoid_ld(x); },
       [](long double x) { return sigmoid_ld(x) * (1 + x * (1 - sigmoid_ld(x))); }},
      {"tanh", [](const Tensor& x) { return tanh(x); },
       [](long double x) { return (std::exp(2 * x) - 1) / (std::exp(2 * x) + 1); },
       [](long double x) {
         const long double c = std::cosh(x);
         return 1 / (c * c);
       }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ld,
       [](long double x) { return sigmoid_ld(x) * (1 - sigmoid_ld(x)); }},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }, [](long double x) { return x * x * x; },
       [](long double x) { return 3 * x * x; }},
  };
}

// Points of both signs and several magnitudes, none at a kink (relu, abs at 0).
std::vector<double> points() { return {-7.5, -3.25, -1.0, -0.375, -0.0625, 0.0078125, 0.3, 0.9, 2.0, 4.75, 9.0}; }

TEST(ReferenceMath, UnaryFunctionsAndDerivativesMatchTheirDefinitions) {
  CpuBackendScope scope(CpuBackend::reference);
  for (const Definition& d : definitions()) {
    Tensor x = Tensor::from_values(points(), {static_cast<std::int64_t>(points().size())}, DType::f64).set_requires_grad();
    const Tensor y = d.op(x);
    sum(y).backward();
    const std::vector<double> got = y.to_doubles();
    const std::vector<double> grad = x.grad().to_doubles();
    for (std::size_t i = 0; i < points().size(); ++i) {
      const long double p = points()[i];
      const long double want = d.value(p), dwant = d.derivative(p);
      // f64 functions: a few ulps of the result (or of 1 near zero, where cancellation is allowed).
      EXPECT_NEAR(got[i], static_cast<double>(want), tolerance(want, 1e-14)) << d.name << " at " << points()[i];
      EXPECT_NEAR(grad[i], static_cast<double>(dwant), tolerance(dwant, 1e-13))
          << d.name << "' at " << points()[i];
    }
  }
}

TEST(ReferenceMath, LogAndSqrtMatchTheirDefinitionsOnPositiveInputs) {
  CpuBackendScope scope(CpuBackend::reference);
  const std::vector<double> pos = {1e-6, 0.01, 0.5, 1.0, 2.0, 37.0, 1e8};
  for (const bool is_log : {true, false}) {
    Tensor x = Tensor::from_values(pos, {static_cast<std::int64_t>(pos.size())}, DType::f64).set_requires_grad();
    const Tensor y = is_log ? log(x) : sqrt(x);
    sum(y).backward();
    for (std::size_t i = 0; i < pos.size(); ++i) {
      const long double p = pos[i];
      const long double want = is_log ? std::log(p) : std::sqrt(p);
      const long double dwant = is_log ? 1 / p : 0.5L / std::sqrt(p);
      EXPECT_NEAR(y.to_doubles()[i], static_cast<double>(want), tolerance(want, 1e-14));
      EXPECT_NEAR(x.grad().to_doubles()[i], static_cast<double>(dwant), tolerance(dwant, 1e-13));
    }
  }
}

// The CPU's f32 kernels (AVX-512, AVX2 or SSE versions of glibc's vector erfc, exp, tanh, whichever the
// CPU runs) keep their digits everywhere, tiny results included: GELU at -12 is -2e-32. Each value within
// 16 ulps of f32 of the definition at the same (f32) input, relative to the value itself, times 1 + x^2:
// erfc(z) falls as exp(-z^2), so the rounding of GELU's argument z = -x / sqrt 2 moves it by 2 z^2 = x^2
// of its ulps, in any f32 formula (80 ulps at -12; the f64 reference has none of it). Each derivative
// (upstream gradient 1) within 16 ulps of the largest derivative on the sweep: derivatives are
// differences of terms of that size (1 - tanh^2, GELU's near -0.75), as in every f32 formula.
TEST(CpuMath, F32UnaryFunctionsAndDerivativesKeepTheirDigitsPerElement) {
  constexpr double kUlps = 16 * 0x1p-24;
  std::vector<double> xs;
  for (int i = -2400; i <= 2400; ++i) xs.push_back(static_cast<float>(i / 200.0 + 1.0 / 1024));  // -12 to 12, never 0
  for (const Definition& d : definitions()) {
    if (d.name == "neg" || d.name == "abs" || d.name == "relu" || d.name == "pow 3") continue;  // no library function
    Tensor x = Tensor::from_values(xs, {static_cast<std::int64_t>(xs.size())}, DType::f32).set_requires_grad();
    const Tensor y = d.op(x);
    sum(y).backward();
    const std::vector<double> got = y.to_doubles(), grad = x.grad().to_doubles();
    long double largest_derivative = 0;
    for (const double v : xs) {
      if (std::fabs(d.value(v)) <= 3e38L) largest_derivative = std::max(largest_derivative, std::fabs(d.derivative(v)));
    }
    int bad = 0;
    for (std::size_t i = 0; i < xs.size() && bad < 5; ++i) {
      const long double want = d.value(xs[i]), dwant = d.derivative(xs[i]);
      if (std::fabs(want) > 3e38L) continue;  // past f32's range (exp)
      const double tol = kUlps * (1 + xs[i] * xs[i]) * static_cast<double>(std::fabs(want)) + 1e-37;
      const double dtol = kUlps * static_cast<double>(largest_derivative);
      if (std::fabs(got[i] - static_cast<double>(want)) > tol || std::fabs(grad[i] - static_cast<double>(dwant)) > dtol) {
        ++bad;
        ADD_FAILURE() << d.name << " at " << xs[i] << ": " << got[i] << " (want " << static_cast<double>(want) << "), derivative "
                      << grad[i] << " (want " << static_cast<double>(dwant) << ")";
      }
    }
  }
}

// The erf GELU's own f32 formula (cpu/unary_math.h: Phi from one exp and a fitted polynomial) keeps
// every digit but the last few everywhere, its tail included, where any formula through erfc(-x / sqrt 2)
// loses x^2 ulps to the rounding of the argument (the allowance of the test above): within 32 ulps of
// 2^-24 relative, without that allowance, from -14.5 (results far into the subnormals: there within a few
// of their spacing) to 8, on the CPU kernel's path (vectorized, and its tails: 45001 elements).
TEST(CpuMath, TheErfGeluKeepsItsDigitsWithoutTheArgumentsAllowance) {
  std::vector<double> xs;
  for (int i = -29000; i <= 16000; ++i) xs.push_back(static_cast<float>(i / 2000.0 + 1.0 / 4096));
  const Tensor y = gelu(Tensor::from_values(xs, {static_cast<std::int64_t>(xs.size())}, DType::f32));
  const std::vector<double> got = y.to_doubles();
  int bad = 0;
  for (std::size_t i = 0; i < xs.size() && bad < 5; ++i) {
    const long double want = xs[i] * Phi(xs[i]);
    const double tol = 32 * 0x1p-24 * static_cast<double>(std::fabs(want)) + 0x1p-147;
    if (std::fabs(got[i] - static_cast<double>(want)) > tol) {
      ++bad;
      ADD_FAILURE() << "gelu at " << xs[i] << ": " << got[i] << " (want " << static_cast<double>(want) << ")";
    }
  }
}

}  // namespace
}  // namespace mantissa
