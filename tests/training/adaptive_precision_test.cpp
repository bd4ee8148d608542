// Adaptive precision: the controller's decisions on records built from known tensors (up for gradients
// held below the smallest normal and for outputs near the top of the format, down to fp8 only after the
// warm-up, held after a move up, blamed skips), its state surviving a checkpoint so that a resumed run
// continues bit for bit, and an underflow-prone configuration in fp16 without loss scaling: its first
// layer gets no gradient at all, until the controller moves the layers to fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "../common/scratch_dir.h"
#include "mantissa/data/datasets.h"
#include "mantissa/io/checkpoint.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/nn/layers.h"
#include "mantissa/nn/models.h"
#include "mantissa/train/trainer.h"

namespace mantissa {
namespace {

using train::LayerPrecision;
using train::TensorKind;
using train::TensorNumerics;

// A record of `kind` for `layer` whose values are those given (true magnitudes), at this loss scale.
TensorNumerics record(const std::string& layer, TensorKind kind, std::vector<double> values, double loss_scale = 1,
                      const std::string& tensor = "") {
  TensorNumerics r = train::measure(Tensor::from_values(values, {static_cast<std::int64_t>(values.size())}, DType::f32));
  r.layer = layer;
  r.kind = kind;
  r.tensor = tensor;
  r.loss_scale = loss_scale;
  return r;
}

// Healthy records for every layer of an MLP: values spread over a few binades, nothing near any limit.
std::vector<TensorNumerics> healthy(const std::vector<std::string>& layers, double loss_scale = 1) {
  std::vector<TensorNumerics> out;
  const std::vector<double> v = {0.5, 0.25, 1.0, 0.125, 2.0, 0.75};
  for (const std::string& l : layers) {
    out.push_back(record(l, TensorKind::activation, v));
    out.push_back(record(l, TensorKind::activation_grad, {1e-3, 2e-3, 5e-4, 3e-3}, loss_scale));
    out.push_back(record(l, TensorKind::weight, {0.01, 0.02, 0.05, 0.03}, 1, "weight"));
    out.push_back(record(l, TensorKind::weight_grad, {1e-3, 2e-3, 5e-4, 3e-3}, loss_scale, "weight"));
  }
  return out;
}

void replace(std::vector<TensorNumerics>& records, const TensorNumerics& r) {
  for (TensorNumerics& x : records) {
    if (x.layer == r.layer && x.kind == r.kind && x.tensor == r.tensor) x = r;
  }
}

const std::vector<std::string> kMlp = {"fc0", "fc1", "fc2"};

nn::Mlp mlp() { return nn::Mlp(nn::MlpConfig{.in = 8, .hidden = 8, .layers = 2, .classes = 4, .seed = 1}); }

TEST(AdaptivePrecision, GradientsHeldBelowTheSmallestNormalMoveALayerUp) {
  nn::Mlp m = mlp();
  train::PrecisionPlan c_plan;
  train::PrecisionController c(m, {.low = DType::f16, .every = 1, .warmup = 1000}, c_plan);
  EXPECT_EQ(c.plan().layers.size(), 3u);
  std::vector<TensorNumerics> r = healthy(kMlp);
  // fc1's output gradients: half of them under 2^-14 (fp16's smallest normal), unscaled.
  replace(r, record("fc1", TensorKind::activation_grad, {1e-6, 2e-6, 1e-3, 2e-3}));
  auto changes = c.decide(1, r);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].layer, "fc1");
  EXPECT_EQ(changes[0].to, LayerPrecision::f32);
  EXPECT_NE(changes[0].reason.find("50.00%"), std::string::npos) << changes[0].reason;
  EXPECT_EQ(c.plan().layers.at("fc1"), LayerPrecision::f32);
  // The same true values at a loss scale of 2^16 are held above it: no change.
  nn::Mlp m2 = mlp();
  train::PrecisionPlan scaled_plan;
  train::PrecisionController scaled(m2, {.low = DType::f16, .every = 1, .warmup = 1000}, scaled_plan);
  std::vector<TensorNumerics> r2 = healthy(kMlp, 65536);
  replace(r2, record("fc1", TensorKind::activation_grad, {1e-6, 2e-6, 1e-3, 2e-3}, 65536));
  EXPECT_TRUE(scaled.decide(1, r2).empty());
  // In bf16 (fp32's range) such gradients are fine.
  nn::Mlp m3 = mlp();
  train::PrecisionPlan bf16_plan;
  train::PrecisionController bf16(m3, {.low = DType::bf16, .fp8 = false, .every = 1, .warmup = 1000}, bf16_plan);
  EXPECT_TRUE(bf16.decide(1, r).empty());
}

TEST(AdaptivePrecision, OutputsNearTheTopOfTheFormatMoveALayerUp) {
  nn::Mlp m = mlp();
  train::PrecisionPlan c_plan;
  train::PrecisionController c(m, {.low = DType::f16, .every = 1, .warmup = 1000}, c_plan);
  std::vector<TensorNumerics> r = healthy(kMlp);
  replace(r, record("fc0", TensorKind::activation, {30000.0, 1.0}));  // within 2^2 of 65504
  const auto changes = c.decide(1, r);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].layer, "fc0");
  EXPECT_NE(changes[0].reason.find("largest value"), std::string::npos) << changes[0].reason;
}

TEST(AdaptivePrecision, SafeLinearLayersMoveDownToFp8AfterTheWarmupAndMovedUpLayersWait) {
  nn::Mlp m = mlp();
  train::PrecisionPlan c_plan;
  train::PrecisionController c(m, {.low = DType::bf16, .fp8 = true, .every = 1, .warmup = 10, .hold = 3}, c_plan);
  EXPECT_TRUE(c.decide(5, healthy(kMlp)).empty());  // in the warm-up
  auto changes = c.decide(10, healthy(kMlp));
  EXPECT_EQ(changes.size(), 3u);
  for (const auto& [path, p] : c.plan().layers) EXPECT_EQ(p, LayerPrecision::quantized) << path;
  auto* fc0 = dynamic_cast<nn::Linear*>(m.named_modules()[1].second);
  ASSERT_NE(fc0, nullptr);
  EXPECT_TRUE(fc0->fp8_active());
  // fc2's output gradient spans 40 binades: per-tensor e5m2 (31.8) loses a quarter of it: up to bf16.
  std::vector<TensorNumerics> r = healthy(kMlp);
  replace(r, record("fc2", TensorKind::activation_grad, {1.0, 0.5, 0.25, std::ldexp(1.0, -40)}));
  changes = c.decide(11, r);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].to, LayerPrecision::low);
  // Healthy again, it waits `hold` decisions before it may move down.
  for (std::int64_t s = 12; s <= 14; ++s) EXPECT_TRUE(c.decide(s, healthy(kMlp)).empty()) << s;
  EXPECT_EQ(c.decide(15, healthy(kMlp)).size(), 1u);
}

TEST(AdaptivePrecision, SkippedStepsBlameTheirLayerUpAndAGoodStepForgives) {
  nn::Mlp m = mlp();
  train::PrecisionPlan c_plan;
  train::PrecisionController c(m, {.low = DType::f16, .every = 1, .warmup = 1000, .skips = 2}, c_plan);
  EXPECT_TRUE(c.blame(3, "fc1.weight", "inf").empty());
  c.count_step(true);
  const auto changes = c.blame(4, "fc1.weight", "inf");
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].layer, "fc1");
  c.count_step(true);
  EXPECT_TRUE(c.blame(5, "fc2", "inf").empty());
  c.count_step(false);  // forgiven
  EXPECT_TRUE(c.blame(7, "fc2", "inf").empty());
}

TEST(AdaptivePrecision, StateAndPlansSurviveTheirJson) {
  nn::Mlp m = mlp();
  train::PrecisionPlan c_plan;
  train::PrecisionController c(m, {.low = DType::bf16, .every = 1, .warmup = 0}, c_plan);
  c.decide(1, healthy(kMlp));
  c.count_step(false);
  EXPECT_EQ(&c.plan(), &c_plan);  // the run's one plan, edited in place
  nn::Mlp m2 = mlp();
  train::PrecisionPlan d_plan;
  train::PrecisionController d(m2, {.low = DType::bf16, .every = 1, .warmup = 0}, d_plan);
  d.load_state_json(c.state_json());
  EXPECT_EQ(d.state_json(), c.state_json());
  EXPECT_EQ(train::PrecisionPlan::parse(c.plan().json()).json(), c.plan().json());
  EXPECT_THROW(d.load_state_json("{}"), std::invalid_argument);
  train::PrecisionPlan bad = c.plan();
  bad.layers["nope"] = LayerPrecision::f32;
  EXPECT_THROW(train::apply_precision_plan(m2, bad), std::invalid_argument);
}


struct MlpRun {
  train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 32, .layers = 2, .classes = 10, .seed = 2}};
  train::ClassificationData data{load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 32, 0};
  train::Trainer trainer{model, data, options()};
  static train::TrainerOptions options() {
    train::TrainerOptions o;
    o.precision = {DType::bf16};
    o.adaptive = train::AdaptiveOptions{.low = DType::bf16, .fp8 = true, .every = 2, .warmup = 2};
    o.steps = 8;
    return o;
  }
};

TEST(AdaptivePrecision, AResumedRunDecidesAndTrainsBitForBitAsTheWholeRun) {
  const auto dir = testing::scratch_dir("adaptive_resume");
  MlpRun whole;
  std::size_t changes = 0;
  for (int i = 0; i < 8; ++i) changes += whole.trainer.step().precision_changes.size();
  EXPECT_GT(changes, 0u);  // the layers moved to fp8 after the warm-up
  MlpRun first;
  for (int i = 0; i < 3; ++i) first.trainer.step();
  first.trainer.save(dir / "step3.safetensors");
  MlpRun second;
  second.trainer.resume(dir / "step3.safetensors");
  for (int i = 3; i < 8; ++i) second.trainer.step();
  EXPECT_EQ(second.trainer.controller()->state_json(), whole.trainer.controller()->state_json());
  const auto a = whole.model.module().named_parameters(), b = second.model.module().named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_doubles(), b[i].second.to_doubles()) << a[i].first;
  // A run without adaptive precision refuses the checkpoint.
  train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 32, .layers = 2, .classes = 10, .seed = 2}};
  train::ClassificationData data{load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 32, 0};
  train::Trainer plain(model, data, {.precision = {DType::bf16}, .steps = 8});
  EXPECT_THROW(plain.resume(dir / "step3.safetensors"), CheckpointError);
  std::filesystem::remove_all(dir);
}

TEST(AdaptivePrecision, TheUnderflowProneConfigurationGetsItsGradientsBack) {
  // The default MLP with a loss weight of 2^-16: in fp16 without loss scaling its gradients flush to zero.
  const auto run = [](bool adaptive) {
    train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 256, .layers = 2, .classes = 10, .seed = 2}};
    train::ClassificationData data{load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 64, 0};
    train::TrainerOptions o;
    o.precision = {DType::f16};
    o.loss_scaling = LossScalerOptions{.kind = LossScaling::none, .compute = DType::f16};
    o.loss_weight = std::ldexp(1.0, -16);
    if (adaptive) o.adaptive = train::AdaptiveOptions{.low = DType::f16, .fp8 = false, .every = 1};
    o.telemetry = train::TelemetryPolicy{.every = 1};
    o.steps = 3;
    train::Trainer t(model, data, o);
    t.step();
    // Step 2's first layer's weight gradient, as measured before the optimizer used it.
    for (const TensorNumerics& n : t.step().numerics) {
      if (n.layer == "fc0" && n.kind == TensorKind::weight_grad && n.tensor == "weight") return n.nonzero();
    }
    return std::int64_t{-1};
  };
  EXPECT_EQ(run(false), 0);        // fp16 flushed every value of it
  EXPECT_GT(run(true), 784 * 128);  // moved to fp32 after step 1: most of its 784 x 256 values back
}

}  // namespace
}  // namespace mantissa
