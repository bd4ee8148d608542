// The numerics telemetry and the non-finite tracer at the level of single tensors and ops: the Numerics
// kernel against its definition (on every dtype, values spread over the whole f32 range, subnormals,
// zeros, inf and NaN), the CPU's kernel against the reference bit for bit, the per-format shares on a
// tensor worked by hand, the JSON round trip, and the tracer naming the op and layer that made an inf.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "../../src/backend/registry.h"
#include "mantissa/autograd/node.h"
#include "mantissa/autograd/watch.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/telemetry.h"
#include "test_support.h"

namespace mantissa {
namespace {

using detail::kLog2Bins;
using detail::kLog2Lowest;
using detail::NumericsStats;

// Values whose exponents spread over all of f32 (subnormals included), with zeros, infinities and NaNs.
Tensor spread(DType dtype, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(-152, 130);
  std::uniform_int_distribution<int> kind(0, 39);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) {
    const int k = kind(rng);
    if (k == 0) x = 0;
    else if (k == 1) x = -std::numeric_limits<double>::infinity();
    else if (k == 2) x = std::numeric_limits<double>::quiet_NaN();
    else x = (k % 2 ? -1 : 1) * std::exp2(exponent(rng));
  }
  return Tensor::from_values(v, {n}, dtype);
}

// The definition, one value at a time: floor(log2 |v|) by std::ilogb.
NumericsStats definition(const Tensor& x, double factor, const std::vector<double>& limits) {
  NumericsStats s;
  s.above.assign(limits.size(), 0);
  for (double v : x.to_doubles()) {
    v *= factor;
    ++s.count;
    if (v == 0) { ++s.zeros; continue; }
    if (!std::isfinite(v)) { ++s.nonfinite; continue; }
    s.amax = std::max(s.amax, std::fabs(v));
    ++s.log2[static_cast<std::size_t>(std::clamp(std::ilogb(v) - kLog2Lowest, 0, kLog2Bins - 1))];
    for (std::size_t i = 0; i < limits.size(); ++i) s.above[i] += std::fabs(v) > limits[i] ? 1 : 0;
  }
  return s;
}

void expect_same(const NumericsStats& a, const NumericsStats& b, const std::string& what) {
  EXPECT_EQ(a.count, b.count) << what;
  EXPECT_EQ(a.zeros, b.zeros) << what;
  EXPECT_EQ(a.nonfinite, b.nonfinite) << what;
  EXPECT_EQ(a.amax, b.amax) << what;
  EXPECT_EQ(a.log2, b.log2) << what;
  EXPECT_EQ(a.above, b.above) << what;
}

TEST(Numerics, KernelsMatchTheDefinitionOnEveryDtype) {
  MANTISSA_TRACE_SEED();
  const std::vector<double> limits = {448, 57344, 65504, 1.0};
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    // Big enough for the CPU kernel's parallel chunks; a view for its strided fallback.
    const Tensor x = spread(dtype, 300001, testing::test_seed() + static_cast<int>(dtype));
    for (const double factor : {1.0, std::ldexp(1.0, -16), 3.0}) {
      const std::string what = std::string(dtype_name(dtype)) + " factor " + std::to_string(factor);
      const NumericsStats want = definition(x, factor, limits);
      NumericsStats ref, cpu;
      {
        CpuBackendScope scope(CpuBackend::reference);
        ref = detail::run_kernel<detail::kernel::Numerics>(x.device(), x, factor, limits);
      }
      cpu = detail::run_kernel<detail::kernel::Numerics>(x.device(), x, factor, limits);
      expect_same(ref, want, "reference " + what);
      expect_same(cpu, want, "cpu " + what);
      const Tensor strided = slice(x, 0, 1, x.size(0), 3);
      expect_same(detail::run_kernel<detail::kernel::Numerics>(x.device(), strided, factor, limits),
                  definition(strided, factor, limits), "strided " + what);
    }
  }
}

TEST(Numerics, SharesPerFormatOnATensorWorkedByHand) {
  const double inf = std::numeric_limits<double>::infinity();
  // Non-zero finite: 2^-30, 2^-20, 2^-10, 1, 1000, 70000 (six values); one zero, one inf.
  const Tensor t = Tensor::from_values({std::ldexp(1.0, -30), -std::ldexp(1.0, -20), std::ldexp(1.0, -10), 1.0, -1000.0,
                                        70000.0, 0.0, inf},
                                       {8}, DType::f32);
  const train::TensorNumerics m = train::measure(t);
  EXPECT_EQ(m.count, 8);
  EXPECT_EQ(m.zeros, 1);
  EXPECT_EQ(m.nonfinite, 1);
  EXPECT_EQ(m.amax, 70000.0);
  // fp16: subnormals from 2^-24, normals from 2^-14, largest 65504.
  EXPECT_DOUBLE_EQ(m.shares(DType::f16).below_subnormal, 1.0 / 6);
  EXPECT_DOUBLE_EQ(m.shares(DType::f16).below_normal, 2.0 / 6);
  EXPECT_DOUBLE_EQ(m.shares(DType::f16).overflow, 1.0 / 6);
  // bf16 holds all of them.
  EXPECT_EQ(m.shares(DType::bf16).below_subnormal, 0);
  EXPECT_EQ(m.shares(DType::bf16).overflow, 0);
  // e4m3: subnormals from 2^-9, normals from 2^-6, largest 448. e5m2: 2^-16, 2^-14, 57344.
  EXPECT_DOUBLE_EQ(m.shares(DType::e4m3).below_subnormal, 3.0 / 6);
  EXPECT_DOUBLE_EQ(m.shares(DType::e4m3).overflow, 2.0 / 6);
  EXPECT_DOUBLE_EQ(m.shares(DType::e5m2).below_subnormal, 2.0 / 6);
  EXPECT_DOUBLE_EQ(m.shares(DType::e5m2).overflow, 1.0 / 6);
  EXPECT_EQ(m.log2_lo, -30);
  EXPECT_EQ(m.log2_counts.size(), 47u);  // 2^-30 .. 70000 (2^16)
  EXPECT_EQ(m.log2_counts.front(), 1);
  EXPECT_EQ(m.log2_counts.back(), 1);
  // Gradients are measured divided by the loss scale.
  EXPECT_EQ(train::measure(t, 0.5).amax, 35000.0);
}

TEST(Numerics, RecordsSurviveTheirJsonForm) {
  train::TensorNumerics m = train::measure(spread(DType::bf16, 1000, 7));
  m.step = 12;
  m.kind = train::TensorKind::activation_grad;
  m.layer = "blocks.1.mlp.fc";
  m.loss_scale = 65536;
  const train::TensorNumerics back = train::TensorNumerics::parse(m.json());
  EXPECT_EQ(back.json(), m.json());
  EXPECT_THROW(train::TensorNumerics::parse("{\"step\": 1}"), std::invalid_argument);
  EXPECT_THROW(train::TensorNumerics::parse("not json"), std::invalid_argument);
}

// What inspect reads: a record whose numbers cannot all be true (edited by hand, or by an attacker, or
// torn) is refused naming the field, not summarized as if it were measured.
TEST(Numerics, RecordsWhoseNumbersCannotBeTrueAreRefusedNamingTheField) {
  train::TensorNumerics m = train::measure(spread(DType::bf16, 1000, 7));
  m.step = 3;
  m.kind = train::TensorKind::activation_grad;
  m.loss_scale = 1024;
  ASSERT_NO_THROW(train::TensorNumerics::parse(m.json()));
  using Edit = void (*)(train::TensorNumerics&);
  const std::vector<std::pair<Edit, std::string>> edits = {
      {[](train::TensorNumerics& r) { r.step = 0; }, "step 0"},
      {[](train::TensorNumerics& r) { r.loss_scale = -1; }, "loss_scale"},
      {[](train::TensorNumerics& r) { r.zeros = r.count + 1; }, "counts that cannot be"},
      {[](train::TensorNumerics& r) { r.nonfinite = -2; }, "counts that cannot be"},
      {[](train::TensorNumerics& r) { r.amax = -1; }, "amax -1"},
      {[](train::TensorNumerics& r) { r.amax *= 4; }, "is not in the histogram's top bin"},
      {[](train::TensorNumerics& r) { r.amax = 0; }, "amax 0"},
      {[](train::TensorNumerics& r) { r.formats[0].below_subnormal = 1.5; }, "formats.f16.below_subnormal 1.5"},
      {[](train::TensorNumerics& r) { r.formats[2].overflow = -0.25; }, "formats.e4m3.overflow"},
      {[](train::TensorNumerics& r) { r.formats[1] = {0.5, 0.25, 0}; }, "formats.bf16.below_subnormal is above below_normal"},
      {[](train::TensorNumerics& r) { r.log2_counts.front() = -1; }, "log2.counts holds -1"},
      {[](train::TensorNumerics& r) { r.log2_counts.back() += 1; }, "log2.counts add up to"},
      {[](train::TensorNumerics& r) { r.log2_lo -= 300; }, "lie outside what bf16 holds"},
  };
  for (const auto& [edit, says] : edits) {
    train::TensorNumerics r = m;
    edit(r);
    try {
      (void)train::TensorNumerics::parse(r.json());
      ADD_FAILURE() << "accepted: " << says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

TEST(Numerics, PolicyPicksKindsAndLayersByPrefix) {
  train::TelemetryPolicy p;
  p.kinds = {train::parse_tensor_kind("activation-grads")};
  p.layers = {"blocks.1"};
  EXPECT_TRUE(p.wants(train::TensorKind::activation_grad, "blocks.1.mlp.fc"));
  EXPECT_TRUE(p.wants(train::TensorKind::activation_grad, "blocks.1"));
  EXPECT_FALSE(p.wants(train::TensorKind::activation_grad, "blocks.10.mlp.fc"));
  EXPECT_FALSE(p.wants(train::TensorKind::weight, "blocks.1.mlp.fc"));
  EXPECT_THROW(train::parse_tensor_kind("biases"), std::invalid_argument);
  EXPECT_TRUE(p.due(1));
  EXPECT_TRUE(p.due(50));
  EXPECT_FALSE(p.due(51));
}

struct TraceOn {
  TraceOn() { set_trace_nonfinite(true); }
  ~TraceOn() { set_trace_nonfinite(false); }
};

TEST(Tracer, NamesTheForwardOpAndLayerThatOverflowed) {
  const TraceOn on;
  const Tensor x = Tensor::full({4, 8}, 300.0, DType::f16).set_requires_grad();
  const LayerScope layer(std::make_shared<const std::string>("stage.square"));
  const Tensor y = mul(x, 2.0);  // 600: fine
  try {
    (void)mul(y, y);  // 360000: past fp16's 65504
    FAIL() << "no report";
  } catch (const NonFiniteError& e) {
    EXPECT_FALSE(e.report().backward);
    EXPECT_EQ(e.report().layer, "stage.square");
    EXPECT_EQ(e.report().dtype, DType::f16);
    EXPECT_EQ(e.report().nonfinite, 32);
    EXPECT_EQ(e.report().nonfinite_input, -1);
    ASSERT_EQ(e.report().input_amax.size(), 2u);
    EXPECT_EQ(e.report().input_amax[0], 600.0);
    EXPECT_NE(std::string(e.what()).find("stage.square"), std::string::npos) << e.what();
  }
}

TEST(Tracer, NamesTheBackwardOpAndSaysWhenAnInputWasAlreadyBad) {
  const TraceOn on;
  const Tensor w = Tensor::full({8}, 3000.0, DType::f16).set_requires_grad();
  Tensor loss;
  {
    const LayerScope layer(std::make_shared<const std::string>("head"));
    loss = sum(mul(w, Tensor::full({8}, 2.0, DType::f16)));  // 48000: finite in fp16
  }
  // A seed of 60000 passes the sum's backward; the product's doubles it past fp16's range.
  try {
    loss.backward(Tensor::full(loss.shape(), 60000.0, loss.dtype()));
    FAIL() << "no report";
  } catch (const NonFiniteError& e) {
    EXPECT_TRUE(e.report().backward);
    EXPECT_EQ(e.report().layer, "head");
  }
  // Data that is already not finite: named as the input, not as the op's fault.
  const Tensor bad = Tensor::from_values({1.0, std::numeric_limits<double>::quiet_NaN()}, {2}, DType::f32);
  const Tensor v = Tensor::full({2}, 1.0, DType::f32).set_requires_grad();
  try {
    (void)add(v, bad);
    FAIL() << "no report";
  } catch (const NonFiniteError& e) {
    EXPECT_EQ(e.report().nonfinite_input, 1);
  }
}

TEST(Tracer, OffChecksNothing) {
  const Tensor x = Tensor::full({4}, 60000.0, DType::f16).set_requires_grad();
  EXPECT_NO_THROW((void)mul(x, x));
}

}  // namespace
}  // namespace mantissa
