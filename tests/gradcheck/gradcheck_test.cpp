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
#include "mantissa/ops/backend_select.h"
#include "mantissa/ops/ops.h"
#include "../unit/test_support.h"

namespace mantissa {
namespace {

// Central differences with step h have error O(h^2) from the third derivative plus O(eps/h) from
// rounding: h = 1e-6 keeps both near 1e-10 for the smooth functions here.
constexpr double kStep = 1e-6;
constexpr double kRelTolerance = 1e-6;
constexpr double kAbsTolerance = 1e-7;

enum class Layout { contiguous, transposed, strided };

struct InputSpec {
  Shape shape;
  Layout layout = Layout::contiguous;
  double low = -2, high = 2;  // values uniform in [low, high)
};

struct Case {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// A leaf with `spec`'s shape whose memory layout is as asked: transposed views swap the last two
// dimensions of a contiguous tensor; strided views take every other element of the first dimension.
Tensor make_input(const InputSpec& spec, std::uint64_t seed) {
  Tensor t;
  if (spec.layout == Layout::transposed && spec.shape.size() >= 2) {
    Shape s = spec.shape;
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    t = transpose(Tensor::uniform(s, DType::f64, seed, spec.low, spec.high), -1, -2);
  } else if (spec.layout == Layout::strided && !spec.shape.empty()) {
    Shape s = spec.shape;
    s[0] = 2 * s[0];
    t = slice(Tensor::uniform(s, DType::f64, seed, spec.low, spec.high), 0, 0, s[0], 2);
  } else {
    t = Tensor::uniform(spec.shape, DType::f64, seed, spec.low, spec.high);
  }
  t.set_requires_grad();
  return t;
}

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
      *p = saved + kStep;
      const double up = loss_value(c, in, r);
      *p = saved - kStep;
      const double down = loss_value(c, in, r);
      *p = saved;
      const double numeric = (up - down) / (2 * kStep);
      const double a = analytic[static_cast<std::size_t>(index)];
      ASSERT_NEAR(a, numeric, kAbsTolerance + kRelTolerance * std::fabs(numeric))
          << "input " << k << " element " << index;
      ++index;
    }
  }
}

std::vector<Case> cases() {
  using V = const std::vector<Tensor>&;
  const Layout T = Layout::transposed;
  const Layout S = Layout::strided;
  std::vector<Case> c;
  c.push_back({"add_broadcast", {{{3, 4}}, {{4}}}, [](V x) { return add(x[0], x[1]); }});
  c.push_back({"sub_broadcast_both", {{{3, 1}}, {{1, 5}}}, [](V x) { return sub(x[0], x[1]); }});
  c.push_back({"mul_transposed", {{{4, 3}, T}, {{4, 3}, S}}, [](V x) { return mul(x[0], x[1]); }});
  c.push_back({"div", {{{2, 3, 4}}, {{3, 1}, Layout::contiguous, 0.5, 2}}, [](V x) { return div(x[0], x[1]); }});
  c.push_back({"scalar_ops", {{{5, 2}, S}}, [](V x) { return add(mul(x[0], -1.5), 0.25); }});
  c.push_back({"pow", {{{6}, Layout::contiguous, 0.5, 2}}, [](V x) { return pow(x[0], 2.5); }});
  c.push_back({"neg", {{{3, 3}, T}}, [](V x) { return neg(x[0]); }});
  c.push_back({"exp", {{{4, 2}}}, [](V x) { return exp(x[0]); }});
  c.push_back({"log", {{{4, 2}, S, 0.2, 3}}, [](V x) { return log(x[0]); }});
  c.push_back({"sqrt", {{{7}, Layout::contiguous, 0.2, 3}}, [](V x) { return sqrt(x[0]); }});
  c.push_back({"relu", {{{5, 4}, T}}, [](V x) { return relu(x[0]); }});
  c.push_back({"gelu", {{{5, 4}}}, [](V x) { return gelu(x[0]); }});
  c.push_back({"silu", {{{5, 4}, S}}, [](V x) { return silu(x[0]); }});
  c.push_back({"tanh", {{{6, 3}}}, [](V x) { return tanh(x[0]); }});
  c.push_back({"sigmoid", {{{6, 3}, T}}, [](V x) { return sigmoid(x[0]); }});
  c.push_back({"sum_all", {{{3, 4}, T}}, [](V x) { return sum(x[0]); }});
  c.push_back({"sum_axes", {{{2, 3, 4}}}, [](V x) { return sum(x[0], {0, 2}); }});
  c.push_back({"mean_keepdim", {{{3, 5}, S}}, [](V x) { return mean(x[0], {1}, true); }});
  c.push_back({"amax", {{{4, 6}}}, [](V x) { return amax(x[0], {-1}); }});
  c.push_back({"variance", {{{3, 7}, T}}, [](V x) { return variance(x[0], {1}, false, 1); }});
  c.push_back({"reshape", {{{3, 4}, T}}, [](V x) { return mul(reshape(x[0], {2, -1}), reshape(x[0], {2, 6})); }});
  c.push_back({"permute", {{{2, 3, 4}}}, [](V x) { return permute(x[0], {2, 0, 1}); }});
  c.push_back({"slice", {{{6, 5}}}, [](V x) { return slice(x[0], 1, 1, -1, 2); }});
  c.push_back({"expand", {{{3, 1}}}, [](V x) { return expand(x[0], {2, 3, 4}); }});
  c.push_back({"concat", {{{2, 3}}, {{4, 3}, S}}, [](V x) {
                 const Tensor parts[] = {x[0], x[1]};
                 return concat(parts, 0);
               }});
  c.push_back({"matmul", {{{3, 5}}, {{5, 4}}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_transposed", {{{3, 5}, T}, {{5, 4}, T}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_batched", {{{2, 3, 4}}, {{2, 4, 5}, T}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_shared_right", {{{2, 3, 4}}, {{4, 2}}}, [](V x) { return matmul(x[0], x[1]); }});
  c.push_back({"linear", {{{4, 3}}, {{5, 3}}, {{5}}}, [](V x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({"softmax", {{{3, 6}}}, [](V x) { return softmax(x[0]); }});
  c.push_back({"softmax_axis0", {{{4, 3}, T}}, [](V x) { return softmax(x[0], 0); }});
  c.push_back({"log_softmax", {{{3, 5}, S}}, [](V x) { return log_softmax(x[0]); }});
  c.push_back({"cross_entropy", {{{4, 5}}}, [](V x) {
                 const std::int64_t t[] = {1, 0, 4, 2};
                 return cross_entropy(x[0], t);
               }});
  c.push_back({"cross_entropy_smooth_ignore_sum", {{{4, 5}, T}}, [](V x) {
                 const std::int64_t t[] = {3, -100, 4, 0};
                 return cross_entropy(x[0], t, Reduction::sum, -100, 0.1);
               }});
  c.push_back({"mse", {{{3, 4}}, {{3, 4}, T}}, [](V x) { return mse_loss(x[0], x[1]); }});
  return c;
}

class GradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheck, MatchesCentralDifferences) {
  CpuBackendScope backend(CpuBackend::reference);
  check(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

}  // namespace
}  // namespace mantissa
