// Optimizers: PyTorch's update rules on worked numbers, the CPU kernels against the reference, master
// weights (the mixed-precision paper's observation that small updates vanish in fp16 without them),
// skipped steps leaving every state bit-identical, exact state save/restore, and the schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mantissa/amp/step.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa {
namespace {

Tensor param(std::initializer_list<double> v, DType t = DType::f32) {
  return Tensor::from_values(v, {static_cast<std::int64_t>(v.size())}, t).set_requires_grad();
}

void set_grad(const Tensor& p, std::initializer_list<double> g) {
  p.set_grad(Tensor::from_values(g, p.shape(), p.dtype()));
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = contiguous_copy(t);
  const auto* b = static_cast<const std::uint8_t*>(c.data());
  return {b, b + c.numel() * static_cast<std::int64_t>(dtype_size(c.dtype()))};
}

TEST(Sgd, MomentumNesterovAndWeightDecayFollowPyTorch) {
  // torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=...) with gradient 0.5 twice,
  // starting from p = 1: d = g + wd p; buf = d (first), then 0.9 buf + d; step = buf, or d + 0.9 buf.
  for (bool nesterov : {false, true}) {
    Tensor p = param({1.0});
    Sgd opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov});
    double w = 1, buf = 0;
    for (int s = 0; s < 2; ++s) {
      set_grad(p, {0.5});
      opt.step();
      const double d = 0.5 + 0.01 * w;
      buf = s == 0 ? d : 0.9 * buf + d;
      w -= 0.1 * (nesterov ? d + 0.9 * buf : buf);
      EXPECT_NEAR(p.item(), w, 1e-6) << "nesterov " << nesterov << " step " << s;
    }
  }
}

TEST(Adam, AdamAndAdamWFollowPyTorch) {
  // torch.optim.Adam / AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1), gradients 0.3, -0.2, 0.5.
  for (bool decoupled : {false, true}) {
    Tensor p = param({2.0});
    Adam opt({p}, {.lr = 0.01, .weight_decay = 0.1}, decoupled);
    double w = 2, m = 0, v = 0;
    const double grads[] = {0.3, -0.2, 0.5};
    for (int t = 1; t <= 3; ++t) {
      double g = grads[t - 1];
      set_grad(p, {g});
      opt.step();
      if (decoupled) {
        w *= 1 - 0.01 * 0.1;
      } else {
        g += 0.1 * w;
      }
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double denom = std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
      w -= 0.01 / (1 - std::pow(0.9, t)) * m / denom;
      EXPECT_NEAR(p.item(), w, 2e-6) << "decoupled " << decoupled << " step " << t;
    }
  }
}

TEST(Optimizers, CpuKernelsMatchTheReference) {
  for (DType state : {DType::f32, DType::bf16}) {
    std::vector<std::vector<double>> results;
    for (CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
      CpuBackendScope scope(backend);
      Tensor a = Tensor::uniform({5000}, DType::f32, 1, -1, 1).set_requires_grad();
      Tensor b = Tensor::uniform({300}, DType::f32, 2, -1, 1).set_requires_grad();
      Adam adam({a}, {.lr = 0.01, .weight_decay = 0.05, .state_dtype = state}, true);
      Sgd sgd({b}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .state_dtype = state});
      for (int s = 0; s < 3; ++s) {
        a.set_grad(Tensor::uniform({5000}, DType::f32, 10 + s, -1, 1));
        b.set_grad(Tensor::uniform({300}, DType::f32, 20 + s, -1, 1));
        const std::vector<double> ga = a.grad().to_doubles(), gb = b.grad().to_doubles();
        adam.step(s == 1 ? 0.25 : 1.0);  // a grad_scale (the fused unscale) on one step
        sgd.step(s == 1 ? 0.25 : 1.0);
        EXPECT_EQ(a.grad().to_doubles(), ga) << "the update scales a copy, never the gradient";
        EXPECT_EQ(b.grad().to_doubles(), gb);
      }
      std::vector<double> r = a.to_doubles();
      const std::vector<double> rb = b.to_doubles();
      r.insert(r.end(), rb.begin(), rb.end());
      results.push_back(r);
    }
    // f32 arithmetic against double, three steps, state rounded to bf16 the same way in both.
    for (std::size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_NEAR(results[1][i], results[0][i], 1e-5) << "element " << i << " state " << dtype_name(state);
    }
  }
}

TEST(MasterWeights, SmallUpdatesVanishInFp16WithoutThemAndAccumulateWithThem) {
  // Updates of 2^-12 of a weight of 1 are below half fp16's ulp there (2^-11): in place they round away.
  constexpr int kSteps = 200;
  const double update = std::ldexp(1.0, -12);
  Tensor pure = param({1.0}, DType::f16);
  Tensor mixed = param({1.0}, DType::f16);
  Sgd pure_opt({pure}, {.lr = update, .master = {.enabled = false, .allow_pure_low_precision = true}});
  Sgd mixed_opt({mixed}, {.lr = update});
  for (int s = 0; s < kSteps; ++s) {
    set_grad(pure, {1.0});
    set_grad(mixed, {1.0});
    pure_opt.step();
    mixed_opt.step();
  }
  EXPECT_EQ(pure.item(), 1.0);  // stopped learning
  const double expected = 1.0 - kSteps * update;
  EXPECT_NEAR(mixed_opt.master_weight(0).item(), expected, 1e-6);  // the f32 master kept every update
  EXPECT_NEAR(mixed.item(), expected, std::ldexp(1.0, -11));  // and the fp16 weight follows it

  // Without master weights and without saying so: refused.
  Tensor p = param({1.0}, DType::bf16);
  EXPECT_THROW(Sgd({p}, {.master = {.enabled = false}}), std::invalid_argument);
}

TEST(MasterWeights, StochasticWriteBackIsUnbiased) {
  // bf16 weights of 1 + 0.3 ulp: nearest rounding writes 1 every time; stochastic rounding averages 1 + 0.3 ulp.
  const int n = 20000;
  const double ulp = std::ldexp(1.0, -7);
  Tensor w = Tensor::full({n}, 1.0, DType::bf16).set_requires_grad();
  Sgd opt({w}, {.lr = 0.3 * ulp, .master = {.writeback = Rounding::stochastic, .seed = 11}});
  w.set_grad(Tensor::full({n}, -1.0, DType::bf16));
  opt.step();
  double mean = 0;
  for (double v : w.to_doubles()) mean += v / n;
  EXPECT_NEAR(mean, 1 + 0.3 * ulp, 6 * ulp * std::sqrt(0.21 / n));
}

TEST(MasterWeights, StochasticWriteBackDrawsAnewEachStepAndResumesWithTheSameDraws) {
  // Masters halfway between two bf16 values and no update (lr 0): each step's write-back draws from
  // (seed + step, element), so consecutive steps round differently; an optimizer restored from a state
  // writes the parameters back exactly as the saved run did at that step, and the same afterwards.
  const int n = 1024;
  const double half_ulp = std::ldexp(1.0, -8);
  const auto run = [&](int steps, std::uint64_t seed) {
    Tensor w = Tensor::full({n}, 1.0, DType::bf16).set_requires_grad();
    Sgd opt({w}, {.lr = half_ulp, .master = {.writeback = Rounding::stochastic, .seed = seed}});
    w.set_grad(Tensor::full({n}, -1.0, DType::bf16));
    opt.step();  // master 1 + half an ulp
    std::vector<std::vector<std::uint8_t>> bits;
    opt.set_lr(0);
    for (int s = 0; s < steps; ++s) {
      opt.step();
      bits.push_back(bytes_of(w));
    }
    return std::make_pair(bits, opt.state());
  };
  const auto [bits, state] = run(3, 5);
  EXPECT_NE(bits[0], bits[1]);  // a per-step seed: with one seed for every step these were equal
  EXPECT_NE(bits[1], bits[2]);
  EXPECT_NE(run(1, 6).first[0], bits[0]);  // and the seed matters
  // Restore the state after step 4 (1 + 3) into fresh parameters: the same bits as the run had then.
  Tensor w2 = Tensor::full({n}, 0.0, DType::bf16).set_requires_grad();
  Sgd restored({w2}, {.lr = 0, .master = {.writeback = Rounding::stochastic, .seed = 5}});
  restored.load_state(state);
  EXPECT_EQ(bytes_of(w2), bits[2]);
  // And the next step draws as the original's next step would.
  const auto [longer, unused] = run(4, 5);
  w2.set_grad(Tensor::full({n}, -1.0, DType::bf16));
  restored.step();
  EXPECT_EQ(bytes_of(w2), longer[3]);
}

TEST(ScaledStep, AnInfInOneGradientElementSkipsTheStepAndChangesNothing) {
  Tensor a = Tensor::uniform({64, 32}, DType::bf16, 1, -1, 1).set_requires_grad();
  Tensor b = Tensor::uniform({32}, DType::f32, 2, -1, 1).set_requires_grad();
  Adam opt({a, b}, adamw_defaults(), true);
  LossScaler scaler;
  const auto scaled_grads = [&](std::uint64_t seed) {
    a.set_grad(mul(Tensor::uniform({64, 32}, DType::bf16, seed, -1, 1), scaler.scale()));
    b.set_grad(mul(Tensor::uniform({32}, DType::f32, seed + 1, -1, 1), scaler.scale()));
  };
  for (std::uint64_t s = 0; s < 3; ++s) {
    scaled_grads(10 + s);
    ASSERT_FALSE(scaled_step(scaler, opt).skipped);
  }
  const OptimizerState before = opt.state();
  const std::vector<std::uint8_t> a_before = bytes_of(a);
  const std::vector<std::uint8_t> b_before = bytes_of(b);
  const double scale_before = scaler.scale();

  scaled_grads(99);
  static_cast<std::uint16_t*>(a.grad().data())[517] = 0x7f80;  // +inf in one bf16 element
  const StepReport r = scaled_step(scaler, opt);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(r.nonfinite, 1);
  EXPECT_EQ(scaler.scale(), scale_before / 2);
  EXPECT_EQ(bytes_of(a), a_before);
  EXPECT_EQ(bytes_of(b), b_before);
  const OptimizerState after = opt.state();
  EXPECT_EQ(after.step, before.step);
  ASSERT_EQ(after.tensors.size(), before.tensors.size());
  for (std::size_t i = 0; i < after.tensors.size(); ++i) {
    EXPECT_EQ(after.tensors[i].first, before.tensors[i].first);
    EXPECT_EQ(bytes_of(after.tensors[i].second), bytes_of(before.tensors[i].second)) << after.tensors[i].first;
  }
  opt.zero_grad();
  EXPECT_THROW(scaled_step(scaler, opt), std::logic_error);  // stepping before backward
}

TEST(ScaledStep, LowPrecisionModelsUnscaleInF32AsApexO2) {
  // An f16 parameter with an f32 master (low-precision-model mode): true gradients of 1e-8 and 3e-7,
  // scaled by 2^16 into f16's normal range. Unscaling in f16 would give 0 (1e-8 is under half of f16's
  // smallest subnormal) and 2.98e-7 (3e-7 rounded to f16's subnormal grid); unscaling in f32 keeps both
  // to the f16 rounding of the scaled value (11 bits). SGD with lr 1 moves the master by the gradient.
  const double scale = 65536;
  Tensor w = Tensor::from_values({0.0, 0.0}, {2}, DType::f16).set_requires_grad();  // f32 holds -1e-8 next to 0
  Sgd opt({w}, SgdOptions{.lr = 1.0});
  LossScalerOptions o = LossScalerOptions::for_compute(DType::f16);
  o.kind = LossScaling::fixed;
  o.init_scale = scale;
  LossScaler scaler(o);
  const double truth[] = {1e-8, 3e-7};
  w.set_grad(Tensor::from_values({truth[0] * scale, truth[1] * scale}, {2}, DType::f16));
  const std::vector<double> scaled = w.grad().to_doubles();  // what f16 holds of the scaled gradient
  ASSERT_FALSE(scaled_step(scaler, opt).skipped);
  const std::vector<double> master = opt.master_weight(0).to_doubles();
  for (int i = 0; i < 2; ++i) {
    const double moved = -master[static_cast<std::size_t>(i)];
    EXPECT_NEAR(moved, scaled[static_cast<std::size_t>(i)] / scale, 1e-3 * truth[i]) << i;  // the f32 division
    EXPECT_NEAR(moved, truth[i], std::ldexp(truth[i], -10)) << i;
  }
  EXPECT_EQ(w.grad().dtype(), DType::f16);  // the model's own gradient keeps its dtype
}

TEST(ScaledStep, AccumulationAndClippingGiveTheUnscaledF32Update) {
  // Two micro-batches of a scaled loss (each half the batch, loss halved), accumulated, unscaled once
  // after the last, clipped by global norm: the same update as one unscaled f32 step on the whole batch.
  const Tensor x = Tensor::randn({8, 5}, DType::f32, 30);
  const std::int64_t labels[] = {0, 2, 1, 2, 0, 1, 1, 2};
  const auto loss_of = [&](const Tensor& w, std::int64_t begin, std::int64_t end) {
    return cross_entropy(linear(slice(x, 0, begin, end), w),
                         std::span<const std::int64_t>(labels + begin, static_cast<std::size_t>(end - begin)));
  };
  const Tensor init = Tensor::randn({3, 5}, DType::f32, 31);
  constexpr double kMaxNorm = 0.05;  // small enough to clip

  Tensor w_ref = contiguous_copy(init).set_requires_grad();
  Sgd ref({w_ref}, {.lr = 0.5});
  loss_of(w_ref, 0, 8).backward();
  const std::vector<Tensor> g_ref = ref.gradients();
  const double factor = clip_grad_norm(g_ref, kMaxNorm);
  ASSERT_LT(factor, 1.0);
  ref.step();

  Tensor w = contiguous_copy(init).set_requires_grad();
  Sgd opt({w}, {.lr = 0.5});
  LossScaler scaler({.kind = LossScaling::fixed, .init_scale = 1024});
  for (std::int64_t half = 0; half < 2; ++half) {
    scaler.scale_loss(mul(loss_of(w, 4 * half, 4 * half + 4), 0.5)).backward();  // accumulates into w.grad
  }
  const StepReport r = scaled_step(scaler, opt, kMaxNorm);
  EXPECT_FALSE(r.skipped);
  const std::vector<double> a = w.to_doubles();
  const std::vector<double> b = w_ref.to_doubles();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
}

TEST(Optimizers, StateRestoresExactly) {
  const auto make = [](std::uint64_t seed) { return Tensor::uniform({40}, DType::bf16, seed, -1, 1).set_requires_grad(); };
  Tensor p1 = make(1);
  Adam a({p1}, {.lr = 0.01});
  for (int s = 0; s < 3; ++s) {
    p1.set_grad(Tensor::uniform({40}, DType::bf16, 50 + s, -1, 1));
    a.step();
  }
  const OptimizerState saved = a.state();
  Tensor p2 = make(7);  // other values: the state restores them through the master copy
  Adam b({p2}, {.lr = 0.01});
  b.load_state(saved);
  EXPECT_EQ(bytes_of(p2), bytes_of(p1));
  for (int s = 0; s < 3; ++s) {
    const Tensor g = Tensor::uniform({40}, DType::bf16, 80 + s, -1, 1);
    p1.set_grad(g);
    p2.set_grad(g);
    a.step();
    b.step();
  }
  EXPECT_EQ(bytes_of(p2), bytes_of(p1));
  EXPECT_EQ(bytes_of(b.master_weight(0)), bytes_of(a.master_weight(0)));
  OptimizerState wrong = saved;
  wrong.tensors[0].second = Tensor::zeros({41}, DType::f32);
  EXPECT_THROW(b.load_state(wrong), std::invalid_argument);
}

TEST(LrSchedule, WarmupThenCosine) {
  const LrSchedule s = LrSchedule::warmup_cosine(1.0, 10, 110, 0.1);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);
  EXPECT_EQ(LrSchedule::constant(0.3).at(1000), 0.3);
}

}  // namespace
}  // namespace mantissa
