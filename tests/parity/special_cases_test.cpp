// NaN and infinities through every case of the one op table (tests/common/op_cases.h): each case's first
// input gets a NaN, a +inf and a -inf at fixed places (and then, with ordinary inputs, the upstream
// gradient gets them), in every compute dtype; the cpu backend must give the class the reference gives,
// element by element, forward and backward: NaN where it has NaN, the same infinity where it has one,
// a number where it has a number. special_values_test.cpp keeps the cases the table cannot hold and the
// pinned semantics (relu and max pooling keep NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/op_cases.h"
#include "mantissa/autograd/node.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

using testing::Case;

// Writes v into the element at logical (row-major) position `index` of a view, whatever its strides.
void set_element(const Tensor& t, std::int64_t index, double v) {
  std::int64_t offset = 0;
  for (std::int64_t d = t.dim() - 1; d >= 0; --d) {
    const auto k = static_cast<std::size_t>(d);
    offset += index % t.shape()[k] * t.strides()[k];
    index /= t.shape()[k];
  }
  switch (t.dtype()) {
    case DType::f32: static_cast<float*>(t.data())[offset] = static_cast<float>(v); return;
    case DType::f64: static_cast<double*>(t.data())[offset] = v; return;
    default:
      static_cast<std::uint16_t*>(t.data())[offset] =
          static_cast<std::uint16_t>(encode(format_of(t.dtype()), static_cast<float>(v)));
  }
}

// The places of the three special values among n elements (distinct for n >= 3).
std::vector<std::int64_t> special_places(std::int64_t n) { return {n / 5, n / 2, n - 1 - n / 5}; }

std::vector<Tensor> inputs_of(const Case& c, DType dtype, bool specials, double fill = NAN) {
  std::vector<Tensor> in;
  for (std::size_t k = 0; k < c.inputs.size(); ++k) in.push_back(testing::make_input(c.inputs[k], 700 + k, dtype));
  if (specials) {
    const double inf = std::numeric_limits<double>::infinity();
    const std::vector<std::int64_t> at = special_places(in[0].numel());
    const double values[] = {std::numeric_limits<double>::quiet_NaN(), inf, -inf};
    for (std::size_t i = 0; i < at.size(); ++i) set_element(in[0], at[i], std::isnan(fill) ? values[i] : fill);
  }
  return in;
}

using mantissa::testing::same_class;

struct Outcome {
  std::vector<double> out, grad;
};

// The case's output and its first input's gradient on `backend`; special inputs, or ordinary inputs and
// special values in the upstream gradient.
Outcome run(const Case& c, DType dtype, CpuBackend backend, bool special_inputs, double fill = NAN) {
  CpuBackendScope scope(backend);
  std::vector<Tensor> in = inputs_of(c, dtype, special_inputs, fill);
  const Tensor y = c.fn(in);
  std::vector<double> g(static_cast<std::size_t>(y.numel()));
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::cos(1.3 * static_cast<double>(i));
  if (!special_inputs) {
    const double inf = std::numeric_limits<double>::infinity();
    const double specials[] = {inf, -inf, std::numeric_limits<double>::quiet_NaN()};
    for (std::size_t i = 0; i < g.size() && i < 3; ++i) g[i] = specials[i];
  }
  y.backward(Tensor::from_values(g, y.shape(), y.dtype()));
  return {y.to_doubles(), in[0].grad().defined() ? in[0].grad().to_doubles() : std::vector<double>{}};
}

class SpecialCases : public ::testing::TestWithParam<DType> {};

TEST_P(SpecialCases, EveryOpCasePropagatesNaNAndInfinitiesAsTheReference) {
  const DType dtype = GetParam();
  for (const Case& c : testing::op_cases()) {
    for (const bool special_inputs : {true, false}) {
      const Outcome want = run(c, dtype, CpuBackend::reference, special_inputs);
      const Outcome got = run(c, dtype, CpuBackend::onednn, special_inputs);
      // Where the window of an output holds a special input: the outputs a NaN at every special place
      // reaches, on the reference.
      std::vector<double> reached;
      if (c.nan_spreads_in_windows && special_inputs) reached = run(c, dtype, CpuBackend::reference, true, NAN).out;
      const std::string what = c.name + (special_inputs ? " (special inputs)" : " (special gradients)");
      // The specials must reach something, or the comparison below would be of ordinary numbers only.
      const auto non_finite = [](const std::vector<double>& v) {
        return std::any_of(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
      };
      EXPECT_TRUE(non_finite(want.out) || non_finite(want.grad)) << what << ": no special value came through";
      ASSERT_EQ(want.out.size(), got.out.size()) << what;
      for (std::size_t i = 0; i < want.out.size(); ++i) {
        if (!reached.empty() && std::isnan(got.out[i]) && std::isnan(reached[i])) continue;
        EXPECT_TRUE(same_class(want.out[i], got.out[i]))
            << what << " output " << i << ": want " << want.out[i] << ", got " << got.out[i];
      }
      ASSERT_EQ(want.grad.size(), got.grad.size()) << what;
      for (std::size_t i = 0; i < want.grad.size(); ++i) {
        if (c.nan_spreads_in_windows && std::isnan(got.grad[i])) continue;  // the backward's windows likewise
        if (c.infinity_may_be_nan && std::isinf(want.grad[i]) && std::isnan(got.grad[i])) continue;
        EXPECT_TRUE(same_class(want.grad[i], got.grad[i]))
            << what << " gradient " << i << ": want " << want.grad[i] << ", got " << got.grad[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SpecialCases, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace mantissa
