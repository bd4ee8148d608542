// Finite-difference gradient check in f64 for every differentiable op: the gradient autograd computes
// must match central differences of L = sum(op(inputs) * R), R a fixed random tensor, element by
// element. Inputs come in random shapes, some as non-contiguous views (transposed, strided slices)
// and some broadcasting. Adding an op means adding one case to the table.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mantissa/autograd/node.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"
#include "../common/op_cases.h"
#include "../unit/test_support.h"

namespace mantissa {
namespace {

// Fourth-order central differences, (8 (f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))) / 12h: truncation error
// O(h^4) from the fifth derivative, plus O(eps/h) from rounding; with h = 1e-6 both stay far below the
// tolerances even where derivatives grow (layer norm of a row with small variance). The plain O(h^2)
// difference was not enough there.
constexpr double kStep = 1e-6;
constexpr double kRelTolerance = 1e-6;
constexpr double kAbsTolerance = 1e-7;

using testing::Case;
using testing::InputSpec;
using testing::make_input;

double loss_value(const Case& c, const std::vector<Tensor>& in, const Tensor& r) {
  NoGradGuard no_grad;
  return sum(mul(c.fn(in), r)).item();
}

void check(const Case& c) {
  MANTISSA_TRACE_SEED();
  SCOPED_TRACE(c.name);
  std::uint64_t seed = testing::test_seed() ^ std::hash<std::string>{}(c.name);
  std::vector<Tensor> in;
  for (const InputSpec& s : c.inputs) in.push_back(make_input(s, seed++));
  const Tensor out = c.fn(in);
  const Tensor r = Tensor::uniform(out.shape(), DType::f64, seed++, -1, 1);
  sum(mul(out, r)).backward();

  for (std::size_t k = 0; k < in.size(); ++k) {
    const Tensor& x = in[k];
    ASSERT_TRUE(x.grad().defined()) << "input " << k << " got no gradient";
    ASSERT_EQ(x.grad().shape(), x.shape());
    const std::vector<double> analytic = x.grad().to_doubles();
    // Perturb each element in place, through the view's own strides.
    std::int64_t index = 0;
    std::vector<std::int64_t> offsets;
    Shape idx(x.shape().size(), 0);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      std::int64_t off = 0;
      std::int64_t rest = i;
      for (std::size_t d = x.shape().size(); d-- > 0;) {
        off += (rest % x.shape()[d]) * x.strides()[d];
        rest /= x.shape()[d];
      }
      offsets.push_back(off);
    }
    for (std::int64_t off : offsets) {
      double* p = x.data_as<double>() + off;
      const double saved = *p;
      const auto at = [&](double offset) {
        *p = saved + offset;
        return loss_value(c, in, r);
      };
      const double numeric = (8 * (at(kStep) - at(-kStep)) - (at(2 * kStep) - at(-2 * kStep))) / (12 * kStep);
      *p = saved;
      const double a = analytic[static_cast<std::size_t>(index)];
      ASSERT_NEAR(a, numeric, kAbsTolerance + kRelTolerance * std::fabs(numeric))
          << "input " << k << " element " << index;
      ++index;
    }
  }
}

class GradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheck, MatchesCentralDifferences) {
  CpuBackendScope backend(CpuBackend::reference);
  check(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, ::testing::ValuesIn(testing::op_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

}  // namespace
}  // namespace mantissa
