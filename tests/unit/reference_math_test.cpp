// The oracle checked against the textbook: the reference backend's unary functions and their
// derivatives, in f64, against definitions written here in long double (erf, exp, tanh straight from the
// formulas, derivatives by their closed forms). The reference's formulas (reference/reference_math.h) are
// written apart from the CPU backend's (cpu/unary_math.h), so parity compares two versions; this test
// checks the oracle itself.
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
long double Phi(long double x) { return 0.5L * (1.0L + std::erf(x / std::sqrt(2.0L))); }

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

}  // namespace
}  // namespace mantissa
