// NaN and infinities through the cpu backend as through the reference: the same outputs are NaN, and
// the same are infinite with the same sign. A loss scaler can only skip a step whose overflow reaches
// the loss or the gradients; an op that turns NaN into a number hides it (oneDNN 2.6's relu, exp and
// softmax did). Every op of the op table gets this in special_cases_test.cpp; here: the cases the
// table cannot hold, and the semantics pinned for relu and max pooling (NaN wins, wherever it sits).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../src/backend/registry.h"
#include "../common/op_cases.h"
#include "mantissa/autograd/node.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

struct SpecialCase {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;  // of a [4, 32] tensor
};

// The cases the op table (tests/common/op_cases.h, whose every case special_cases_test.cpp runs with
// NaN and infinities) cannot hold: a round trip through fp8 (no gradient check passes through a format
// that coarse), one row of a batch, a reduction over the first axis of this [4, 32] input.
std::vector<SpecialCase> special_cases() {
  const std::vector<std::int64_t> targets{1, 7, 0, 31};
  return {
      {"cast_roundtrip", [](const Tensor& x) { return cast(cast(x, DType::e5m2), x.dtype()); }},
      {"cross_entropy_rows", [targets](const Tensor& x) { return cross_entropy(slice(x, 0, 0, 1, 1), {targets.data(), 1}); }},
      {"sum_columns", [](const Tensor& x) { return sum(x, {0}); }},
  };
}

// Row 0 holds a NaN, row 1 a +inf, row 2 a -inf, row 3 a NaN and a +inf side by side (a 2x2 pooling
// window); the rest are ordinary values of both signs.
Tensor special_input(DType dtype, bool with_specials = true) {
  std::vector<double> v(4 * 32);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 2 * std::sin(0.7 * static_cast<double>(i));
  if (!with_specials) return Tensor::from_values(v, {4, 32}, dtype);
  const double inf = std::numeric_limits<double>::infinity();
  v[5] = std::numeric_limits<double>::quiet_NaN();
  v[40] = inf;
  v[70] = -inf;
  v[100] = std::numeric_limits<double>::quiet_NaN();
  v[101] = inf;
  return Tensor::from_values(v, {4, 32}, dtype);
}

// NaN where the reference has NaN, the same infinity where it has one, and a number where it has a number
// (parity_test.cpp checks how close): an inf that comes out finite, or a number that comes out NaN, fails.
using mantissa::testing::same_class;

class SpecialValues : public ::testing::TestWithParam<DType> {};

TEST_P(SpecialValues, PropagateAsInTheReference) {
  const DType dtype = GetParam();
  for (const SpecialCase& c : special_cases()) {
    NoGradGuard no_grad;
    std::vector<double> want, got;
    {
      CpuBackendScope scope(CpuBackend::reference);
      want = c.fn(special_input(dtype)).to_doubles();
    }
    {
      CpuBackendScope scope(CpuBackend::onednn);
      got = c.fn(special_input(dtype)).to_doubles();
    }
    ASSERT_EQ(want.size(), got.size()) << c.name;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::string what = c.name + " element " + std::to_string(i) + ": want " + std::to_string(want[i]) +
                               ", got " + std::to_string(got[i]);
      EXPECT_TRUE(same_class(want[i], got[i])) << what;
    }
  }
}

// The same for gradients: special values in the input (ordinary upstream gradient), then ordinary inputs
// with special values in the upstream gradient (inf, -inf, NaN at its first elements).
TEST_P(SpecialValues, GradientsPropagateAsInTheReference) {
  const DType dtype = GetParam();
  for (const SpecialCase& c : special_cases()) {
    for (const bool special_input_values : {true, false}) {
      std::vector<std::vector<double>> grads;
      for (const CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
        CpuBackendScope scope(backend);
        Tensor x = special_input(dtype, special_input_values);
        x.set_requires_grad();
        const Tensor y = c.fn(x);
        std::vector<double> g(static_cast<std::size_t>(y.numel()));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::cos(1.3 * static_cast<double>(i));
        if (!special_input_values) {
          const double inf = std::numeric_limits<double>::infinity();
          const double specials[] = {inf, -inf, std::numeric_limits<double>::quiet_NaN()};
          for (std::size_t i = 0; i < g.size() && i < 3; ++i) g[i] = specials[i];
        }
        y.backward(Tensor::from_values(g, y.shape(), y.dtype()));
        grads.push_back(x.grad().to_doubles());
      }
      for (std::size_t i = 0; i < grads[0].size(); ++i) {
        EXPECT_TRUE(same_class(grads[0][i], grads[1][i]))
            << c.name << (special_input_values ? " (special inputs)" : " (special gradients)") << " element " << i
            << ": want " << grads[0][i] << ", got " << grads[1][i];
      }
    }
  }
}

// What both backends agree on, pinned: relu and max pooling keep NaN (PyTorch's semantics), wherever
// it sits in a pooling window.
TEST(SpecialValues, ReluAndMaxPoolingKeepNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
    CpuBackendScope scope(backend);
    for (const DType d : {DType::f32, DType::bf16, DType::f16}) {
      const std::vector<double> r = relu(Tensor::from_values({nan, -1, 2, -std::numeric_limits<double>::infinity()}, {4}, d)).to_doubles();
      EXPECT_TRUE(std::isnan(r[0])) << dtype_name(d);
      EXPECT_EQ(r[1], 0);
      EXPECT_EQ(r[2], 2);
      EXPECT_EQ(r[3], 0);
      const Tensor x = Tensor::from_values({1, nan, 3, 2}, {1, 1, 2, 2}, d).set_requires_grad();
      const Tensor y = max_pool2d(x, 2, 2);
      EXPECT_TRUE(std::isnan(y.to_doubles()[0])) << dtype_name(d);
      y.backward(Tensor::full({1, 1, 1, 1}, 1, d));
      EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{0, 1, 0, 0})) << dtype_name(d);  // to the NaN
    }
  }
}

// 2x2 max pooling (the cpu backend walks row pairs across planes, 16 columns at a time with AVX-512, the
// row's last ones masked) on values from {0, 1, NaN}: ties and NaN in every arrangement; forward and
// gradients as the reference. Wide rows; odd heights and widths (a row and a column in no window); many
// planes of few row pairs, so that the threads' spans cross planes.
TEST(SpecialValues, MaxPoolingTiesAndNaNOnWideRows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Shape& shape : {Shape{2, 3, 6, 38}, Shape{3, 5, 7, 41}, Shape{2, 3, 9, 3}, Shape{16, 40, 4, 14}}) {
    std::vector<double> v(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::size_t r = (i * 2654435761U) % 97;
      v[i] = r < 8 ? nan : (r < 52 ? 1.0 : 0.0);
    }
    for (const DType d : {DType::f32, DType::bf16, DType::f16}) {
      std::vector<std::vector<double>> outs, grads;
      for (const CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
        CpuBackendScope scope(backend);
        Tensor x = Tensor::from_values(v, shape, d).set_requires_grad();
        const Tensor y = max_pool2d(x, 2, 2);
        std::vector<double> g(static_cast<std::size_t>(y.numel()));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = 1 + static_cast<double>(i % 7);
        y.backward(Tensor::from_values(g, y.shape(), d));
        outs.push_back(y.to_doubles());
        grads.push_back(x.grad().to_doubles());
      }
      const std::string what = shape_str(shape) + " " + std::string(dtype_name(d));
      {  // The kernel writes every element of grad_x, those in no window too: given one full of 7s.
        CpuBackendScope scope(CpuBackend::onednn);
        const Tensor x = Tensor::from_values(v, shape, d);
        const Shape out_shape{shape[0], shape[1], shape[2] / 2, shape[3] / 2};
        std::vector<double> g(static_cast<std::size_t>(out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3]));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = 1 + static_cast<double>(i % 7);
        const Tensor gx = Tensor::full(shape, 7, d);
        detail::run_kernel<detail::kernel::Pool2dBackward>(Device::cpu(), x, Tensor::from_values(g, out_shape, d),
                                                           Pool2dParams{2, 2, 2, 2, 0, 0, true}, gx);
        EXPECT_EQ(gx.to_doubles(), grads[0]) << what << ", the kernel alone";
      }
      ASSERT_EQ(outs[0].size(), outs[1].size()) << what;
      for (std::size_t i = 0; i < outs[0].size(); ++i) {
        EXPECT_TRUE(std::isnan(outs[0][i]) ? std::isnan(outs[1][i]) : outs[0][i] == outs[1][i]) << what << " output " << i;
      }
      EXPECT_EQ(grads[0], grads[1]) << what;
    }
  }
}

// The cpu backend's relu works on the bits of 16-bit formats: every pattern against the reference.
TEST(SpecialValues, ReluOfEvery16BitPatternMatchesTheReference) {
  for (const DType d : {DType::bf16, DType::f16}) {
    const Tensor x = Tensor::empty({1 << 16}, d);
    for (std::uint32_t i = 0; i < (1U << 16); ++i) static_cast<std::uint16_t*>(x.data())[i] = static_cast<std::uint16_t>(i);
    std::vector<double> want, got;
    {
      CpuBackendScope scope(CpuBackend::reference);
      want = relu(x).to_doubles();
    }
    got = relu(x).to_doubles();
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << dtype_name(d) << " pattern " << i;
      } else {
        EXPECT_EQ(want[i], got[i]) << dtype_name(d) << " pattern " << i;
        EXPECT_EQ(std::signbit(want[i]), std::signbit(got[i])) << dtype_name(d) << " pattern " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SpecialValues, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace mantissa
