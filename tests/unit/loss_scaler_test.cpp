// The loss scaler: PyTorch GradScaler's scale sequence on scripted overflows, the documented hysteresis,
// floor, ceiling and collapse report, the guards, and the fused gradient pass.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mantissa/amp/loss_scaler.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"
#include "test_support.h"

namespace mantissa {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One step whose (scaled) gradient overflows or not; returns the scale after update().
double step(LossScaler& s, bool overflow, StepReport* report = nullptr) {
  const Tensor g = Tensor::from_values({1.0, overflow ? kInf : 2.0, -3.0}, {3}, DType::f32);
  const Tensor grads[] = {g};
  const StepReport r = s.unscale(grads);
  if (report) *report = r;
  s.update();
  return s.scale();
}

std::vector<double> run(LossScaler& s, const std::vector<bool>& overflows) {
  std::vector<double> scales;
  for (bool o : overflows) scales.push_back(step(s, o));
  return scales;
}

TEST(LossScaler, DefaultsAreGradScalers) {
  const LossScalerOptions o;
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_EQ(o.hysteresis, 1);  // GradScaler has no hysteresis, no floor and no ceiling
  EXPECT_EQ(o.min_scale, 0.0);
  EXPECT_EQ(o.max_scale, kInf);
  const LossScalerOptions ds = LossScalerOptions::deepspeed();  // DeepSpeed's DynamicLossScaler defaults
  EXPECT_EQ(ds.init_scale, 65536.0);
  EXPECT_EQ(ds.growth_interval, 1000);
  EXPECT_EQ(ds.hysteresis, 2);
  EXPECT_EQ(ds.min_scale, 1.0);
  EXPECT_FALSE(ds.consecutive_hysteresis);
  EXPECT_EQ(LossScalerOptions::for_compute(DType::f16).kind, LossScaling::dynamic);
  EXPECT_EQ(LossScalerOptions::for_compute(DType::bf16).kind, LossScaling::none);
  EXPECT_EQ(LossScaler(LossScalerOptions::for_compute(DType::bf16)).scale(), 1.0);
}

TEST(LossScaler, ScaleSequenceFollowsPyTorch) {
  // torch.cuda.amp.GradScaler(growth_interval=3): grow after 3 good steps in a row, halve on overflow and
  // restart the count (the sequence _amp_update_scale_ produces).
  LossScalerOptions o;
  o.growth_interval = 3;
  o.max_scale = 1e30;
  LossScaler s(o);
  const std::vector<double> got = run(s, {false, false, false, true, false, false, true, false, false, false, false});
  const std::vector<double> want = {65536, 65536, 131072, 65536, 65536, 65536, 32768, 32768, 32768, 65536, 65536};
  EXPECT_EQ(got, want);
  EXPECT_EQ(s.state().growth_tracker, 1);
  EXPECT_EQ(s.state().steps, 11);
  EXPECT_EQ(s.state().skipped, 2);
}

TEST(LossScaler, GrowthThatWouldReachInfinityIsIgnored) {
  LossScalerOptions o;
  o.init_scale = std::ldexp(1.0, 127);
  o.growth_interval = 1;
  o.max_scale = kInf;
  LossScaler s(o);
  EXPECT_EQ(step(s, false), std::ldexp(1.0, 127));  // 2^128 is not a finite f32: kept, tracker reset
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(LossScaler, HysteresisFollowsDeepSpeed) {
  // DeepSpeed's DynamicLossScaler.update_scale with delayed_shift 2, scale_window 2: an overflow with
  // hysteresis left backs nothing off and uses one up; with one left it backs off and stays at one, so
  // further overflows back off each time; the scale growing re-arms it.
  LossScalerOptions o;
  o.hysteresis = 2;
  o.growth_interval = 2;
  LossScaler s(o);
  StepReport r;
  EXPECT_EQ(step(s, true, &r), 65536);  // first overflow tolerated (still skipped)
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(step(s, true), 32768);  // none left: back off
  EXPECT_EQ(step(s, true), 16384);  // still none left (no re-arming on backoff): back off again
  EXPECT_EQ(run(s, {false, false}), (std::vector<double>{16384, 32768}));  // growth re-arms
  EXPECT_EQ(step(s, true), 32768);   // tolerated again
  EXPECT_EQ(step(s, false), 32768);  // a good step alone does not re-arm
  EXPECT_EQ(step(s, true), 16384);
  // consecutive_hysteresis: every good step re-arms.
  o.consecutive_hysteresis = true;
  LossScaler c(o);
  EXPECT_EQ(run(c, {true, false, true, false, true}), (std::vector<double>{65536, 65536, 65536, 65536, 65536}));
}

TEST(LossScaler, FloorAndCeilingBoundTheScaleAndACollapseIsReported) {
  LossScalerOptions o;
  o.init_scale = 4;
  o.min_scale = 1;
  o.floor_patience = 3;
  LossScaler s(o);
  EXPECT_EQ(run(s, {true, true}), (std::vector<double>{2, 1}));
  StepReport r;
  step(s, true, &r);  // at the floor: first
  EXPECT_EQ(s.scale(), 1);
  EXPECT_TRUE(r.warning.empty());
  step(s, true, &r);  // second
  EXPECT_TRUE(r.warning.empty());
  step(s, true, &r);  // third in a row at the floor: reported
  EXPECT_NE(r.warning.find("collapsed"), std::string::npos) << r.warning;
  step(s, false, &r);  // a good step clears the count
  EXPECT_EQ(s.state().floor_overflows, 0);

  o.error_on_collapse = true;
  o.floor_patience = 1;
  o.init_scale = 1;
  LossScaler strict(o);
  EXPECT_THROW(step(strict, true), LossScaleCollapse);

  LossScalerOptions c;
  c.init_scale = 65536;
  c.max_scale = 131072;  // a ceiling, asked for
  c.growth_interval = 1;
  LossScaler capped(c);
  EXPECT_EQ(run(capped, {false, false, false}), (std::vector<double>{131072, 131072, 131072}));
}

TEST(LossScaler, FixedAndNoneKeepTheirScaleButStillSkipOverflow) {
  LossScalerOptions o;
  o.kind = LossScaling::fixed;
  o.init_scale = 128;
  LossScaler fixed(o);
  StepReport r;
  EXPECT_EQ(step(fixed, true, &r), 128);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(step(fixed, false), 128);
  o.kind = LossScaling::none;
  LossScaler none(o);
  EXPECT_EQ(step(none, false), 1);
}

TEST(LossScaler, MisuseIsAnErrorWithTheFix) {
  LossScaler s;
  const Tensor g = Tensor::full({2}, 1.0, DType::f32);
  const Tensor grads[] = {g};
  EXPECT_THROW(s.update(), std::logic_error);  // update before unscale
  s.unscale(grads);
  EXPECT_THROW(s.unscale(grads), std::logic_error);  // twice in one step
  s.update();
  const Tensor missing[] = {Tensor()};
  EXPECT_THROW(s.unscale(missing), std::logic_error);  // stepping before backward
}

TEST(LossScaler, UnscalesExactlyAndReportsNormNonfiniteAndUnderflow) {
  for (CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
    CpuBackendScope scope(backend);
    LossScaler s;  // scale 65536
    const double scale = 65536;
    // 3 * scale and 4 * scale unscale to 3 and 4 (norm 5). 1e-8 (unscaled) is below half fp16's smallest
    // subnormal (2.98e-8): it would flush to zero unscaled. 0 is not counted as underflow.
    Tensor a = Tensor::from_values({3 * scale, 4 * scale}, {2}, DType::f32);
    Tensor b = Tensor::from_values({1e-8 * scale, 0.0, 1e-7 * scale, 0.0}, {4}, DType::f32);
    const Tensor grads[] = {a, b};
    const StepReport r = s.unscale(grads);
    s.update();
    EXPECT_FALSE(r.skipped);
    EXPECT_EQ(a.to_doubles(), (std::vector<double>{3, 4}));
    EXPECT_NEAR(r.grad_norm, 5, 1e-6);
    EXPECT_DOUBLE_EQ(r.underflow_fraction, 1.0 / 6.0);
    EXPECT_EQ(r.scale, scale);

    Tensor c = Tensor::from_values({1.0, std::nan(""), -kInf, 2.0}, {4}, DType::bf16);
    const Tensor bad[] = {c};
    const StepReport q = s.unscale(bad);
    s.update();
    EXPECT_TRUE(q.skipped);
    EXPECT_EQ(q.nonfinite, 2);
  }
}

// Both backends agree on a large random gradient (many blocks, threads) with and without a scale, and
// values whose squares overflow f32 still give a finite norm.
TEST(LossScaler, FastGradientCheckAgreesWithTheReference) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  for (const double scale : {1.0, 1024.0}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      std::vector<StepReport> reports;
      for (CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
        CpuBackendScope scope(backend);
        LossScalerOptions o;
        o.kind = LossScaling::fixed;
        o.init_scale = scale;
        LossScaler s(o);
        Tensor g = Tensor::uniform({100003}, dtype, seed, -3 * scale, 3 * scale);
        Tensor tiny = Tensor::from_values({1e-9 * scale, 0.0, 2e20 * scale, -3e20 * scale}, {4}, dtype);
        const Tensor grads[] = {g, tiny};
        reports.push_back(s.unscale(grads));
        s.update();
      }
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " scale " + std::to_string(scale));
      EXPECT_EQ(reports[0].nonfinite, 0);
      EXPECT_EQ(reports[1].nonfinite, 0);
      EXPECT_EQ(reports[0].underflow_fraction, reports[1].underflow_fraction);
      EXPECT_GT(reports[0].underflow_fraction, 0);
      // The norm is dominated by the two huge values: sqrt(2^2 + 3^2) 1e20.
      EXPECT_NEAR(reports[1].grad_norm / reports[0].grad_norm, 1, 1e-6);
      EXPECT_NEAR(reports[0].grad_norm / (std::sqrt(13.0) * 1e20), 1, 1e-2);
    }
  }
}

// A step's gradients in one check: many tensors of every size, a strided view among them, in two
// dtypes. Both backends write the same values and find the same counts and norm.
TEST(LossScaler, AListOfGradientsIsCheckedAsOneOnBothBackends) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  std::vector<std::vector<std::vector<double>>> written;
  std::vector<StepReport> reports;
  for (CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
    CpuBackendScope scope(backend);
    LossScalerOptions o;
    o.kind = LossScaling::fixed;
    o.init_scale = 512;
    LossScaler s(o);
    std::vector<Tensor> grads;
    const std::int64_t sizes[] = {1, 7, 5000, 2048, 2049, 300000, 3};
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      const DType dtype = i % 2 == 0 ? DType::f32 : DType::bf16;
      grads.push_back(Tensor::uniform({sizes[i]}, dtype, seed + i, -512, 512));
    }
    grads.push_back(transpose(Tensor::uniform({37, 5}, DType::f32, seed + 99, -1e-6, 1e-6), 0, 1));  // underflows
    reports.push_back(s.unscale(grads));
    s.update();
    written.emplace_back();
    for (const Tensor& g : grads) written.back().push_back(g.to_doubles());
  }
  EXPECT_EQ(written[0], written[1]);
  EXPECT_EQ(reports[0].nonfinite, reports[1].nonfinite);
  EXPECT_EQ(reports[0].underflow_fraction, reports[1].underflow_fraction);
  EXPECT_GT(reports[0].underflow_fraction, 0);
  // The CPU sums squares in f32 over blocks of 2048 values: at most 2048 roundings of 2^-24 each.
  const double f32_block_sum = 2048 * std::ldexp(1.0, -24);
  EXPECT_NEAR(reports[1].grad_norm / reports[0].grad_norm, 1, f32_block_sum);
}

TEST(LossScaler, StateRoundTripsExactly) {
  LossScalerOptions o;
  o.growth_interval = 3;
  o.hysteresis = 2;
  LossScaler a(o);
  run(a, {false, true, false, true, false});
  const LossScalerState saved = a.state();
  LossScaler b(o);
  b.load_state(saved);
  EXPECT_EQ(b.state(), saved);
  const std::vector<bool> rest = {false, false, true, true, false, false, false};
  EXPECT_EQ(run(a, rest), run(b, rest));
  LossScalerState broken = saved;
  broken.scale = -1;
  EXPECT_THROW(b.load_state(broken), std::invalid_argument);
}

TEST(ClipGradNorm, ScalesAllGradientsToTheMaximumNorm) {
  Tensor a = Tensor::from_values({3, 0}, {2}, DType::f32);
  Tensor b = Tensor::from_values({4}, {1}, DType::f32);
  const Tensor grads[] = {a, b};
  const double f = clip_grad_norm(grads, 1.0);
  EXPECT_NEAR(f, 0.2, 1e-6);
  EXPECT_NEAR(a.to_doubles()[0], 0.6, 1e-6);
  EXPECT_NEAR(b.to_doubles()[0], 0.8, 1e-6);
  EXPECT_EQ(clip_grad_norm(grads, 10.0), 1.0);  // already within
}

}  // namespace
}  // namespace mantissa
