// The numerics tools on real training steps: faults planted in one layer of the GPT are named exactly by
// the non-finite tracer (forward and backward), a skipped step names the gradients that held the inf, a
// run of skips is explained once (and stops the run when asked), the learning-rate schedule can hold on
// skipped steps, and the telemetry measures what the policy picks, gradients unscaled.
#include <gtest/gtest.h>

#include <cmath>

#include "mantissa/data/datasets.h"
#include "mantissa/nn/models.h"
#include "mantissa/train/trainer.h"

namespace mantissa {
namespace {

using GptModel = train::ModuleModel<nn::Gpt>;

// A small GPT on the fortunes, in fp16 (autocast) with a static loss scale: each planted fault shows in
// the first step.
struct GptRun {
  GptModel model{nn::GptConfig{.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 32, .vocab = 256, .seed = 3}};
  train::TextData data{TextCorpus::load(kFortunesDir), 4, 32, 0, 2, "fortunes"};

  train::Trainer trainer(bool trace, double loss_scale = 1024) {
    train::TrainerOptions o;
    o.precision = {DType::f16};
    o.loss_scaling = LossScalerOptions{.kind = LossScaling::fixed, .init_scale = loss_scale, .compute = DType::f16};
    o.trace_nonfinite = trace;
    o.steps = 10;
    return train::Trainer(model, data, o);
  }
  // Multiplies a parameter (f32) by factor, in place.
  void scale(const std::string& name, double factor) {
    for (auto& [n, p] : model.module().named_parameters()) {
      if (n != name) continue;
      float* v = p.data_as<float>();
      for (std::int64_t i = 0; i < p.numel(); ++i) v[i] = static_cast<float>(v[i] * factor);
      return;
    }
    FAIL() << "no parameter " << name;
  }
  // The same function, another balance: block 1's second norm 2^18 smaller, the MLP's first weight 2^18
  // larger. Forward stays finite; the product's input gradient (weight times output gradient, with
  // GradScaler's initial scale of 2^16) overflows.
  void plant_backward_fault() {
    scale("blocks.1.ln2.weight", std::ldexp(1.0, -18));
    scale("blocks.1.ln2.bias", std::ldexp(1.0, -18));
    scale("blocks.1.mlp.fc.weight", std::ldexp(1.0, 18));
  }
};

TEST(NonFiniteTracer, NamesTheGptLayerWhoseActivationBlowsUp) {
  GptRun run;
  // Block 1's first MLP weight scaled by 2^18: still within fp16 (|w| < 2^15), but its products pass 65504.
  run.scale("blocks.1.mlp.fc.weight", std::ldexp(1.0, 18));
  train::Trainer t = run.trainer(true);
  const train::StepRecord r = t.step();
  ASSERT_TRUE(r.trace.has_value());
  EXPECT_EQ(r.trace->layer, "blocks.1.mlp.fc") << r.trace->str();
  EXPECT_EQ(r.trace->op, "linear");
  EXPECT_FALSE(r.trace->backward);
  EXPECT_EQ(r.trace->dtype, DType::f16);
  EXPECT_EQ(r.trace->nonfinite_input, -1);
  EXPECT_EQ(r.trace->loss_scale, 1024);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(t.scaler().state().skipped, 1);
}

TEST(NonFiniteTracer, NamesTheGptLayerWhoseGradientBlowsUp) {
  GptRun run;
  run.plant_backward_fault();
  train::Trainer traced = run.trainer(true, 65536);
  const train::StepRecord r = traced.step();
  ASSERT_TRUE(r.trace.has_value());
  EXPECT_EQ(r.trace->layer, "blocks.1.mlp.fc") << r.trace->str();
  EXPECT_TRUE(r.trace->backward);
  EXPECT_TRUE(std::isnan(r.loss));
  // Without the tracer the step is skipped too, and the record names the gradients that held the inf.
  GptRun plain;
  plain.plant_backward_fault();
  train::Trainer untraced = plain.trainer(false, 65536);
  const train::StepRecord u = untraced.step();
  EXPECT_TRUE(u.skipped);
  EXPECT_FALSE(u.trace.has_value());
  ASSERT_FALSE(u.nonfinite_grads.empty());
}

// The MLP on Fashion-MNIST with infs injected into steps 2 to 6.
struct MlpRun {
  train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 16, .layers = 1, .classes = 10, .seed = 1}};
  train::ClassificationData data{load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 16, 0};
  static train::TrainerOptions options() {
    train::TrainerOptions o;
    o.precision = {DType::bf16};
    o.schedule = LrSchedule::warmup_cosine(1e-3, 10, 100, 1e-4);
    o.inject_nonfinite = {2, 3, 4, 5, 6};
    o.skip_patience = 3;
    o.steps = 100;
    return o;
  }
};

TEST(StallReport, ExplainsARunOfSkipsOnceNamingTheGradient) {
  MlpRun run;
  train::Trainer t(run.model, run.data, MlpRun::options());
  std::vector<std::string> warnings;
  for (int i = 0; i < 7; ++i) warnings.push_back(t.step().warning);
  EXPECT_TRUE(warnings[1].empty());
  EXPECT_TRUE(warnings[2].empty());
  // The third skip in a row (step 4) explains, naming the parameter whose gradient held the inf.
  EXPECT_NE(warnings[3].find("3 steps in a row skipped (steps 2-4)"), std::string::npos) << warnings[3];
  EXPECT_NE(warnings[3].find("fc0.weight"), std::string::npos) << warnings[3];
  EXPECT_TRUE(warnings[4].empty());
  EXPECT_TRUE(warnings[5].empty());
}

TEST(StallReport, StopsTheRunWhenAsked) {
  MlpRun run;
  train::TrainerOptions o = MlpRun::options();
  o.stop_on_stall = true;
  train::Trainer t(run.model, run.data, o);
  t.step();
  t.step();
  t.step();
  EXPECT_THROW(t.step(), train::TrainingStalled);
}

TEST(StallReport, TheScheduleCanHoldOnSkippedSteps) {
  for (const bool hold : {false, true}) {
    MlpRun run;
    train::TrainerOptions o = MlpRun::options();
    o.hold_lr_on_skip = hold;
    train::Trainer t(run.model, run.data, o);
    std::vector<double> lr;
    for (int i = 0; i < 8; ++i) lr.push_back(t.step().lr);
    // Warm-up over 10 steps: the i-th schedule step (from 0) runs at 1e-3 (i + 1) / 10. Step 7 is the 7th,
    // or, holding, the 2nd: steps 2-6 were skipped.
    EXPECT_DOUBLE_EQ(lr[6], hold ? 2e-4 : 7e-4) << hold;
    EXPECT_DOUBLE_EQ(lr[7], hold ? 3e-4 : 8e-4) << hold;
  }
}

TEST(Telemetry, MeasuresWhatThePolicyPicksWithGradientsUnscaled) {
  std::vector<train::StepRecord> records;
  for (const double scale : {1.0, 1024.0}) {
    train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 16, .layers = 1, .classes = 10, .seed = 1}};
    train::ClassificationData data{load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 16, 0};
    train::TrainerOptions o;
    o.loss_scaling = LossScalerOptions{.kind = LossScaling::fixed, .init_scale = scale, .compute = DType::f32};
    o.telemetry = train::TelemetryPolicy{.every = 2};
    o.steps = 3;
    train::Trainer t(model, data, o);
    const train::StepRecord first = t.step();
    EXPECT_FALSE(t.step().numerics.empty());  // step 2
    EXPECT_TRUE(t.step().numerics.empty());   // step 3: not sampled
    records.push_back(first);
  }
  // Two layers (fc0, fc1), each: output, output gradient, weight and bias, and their gradients.
  const std::vector<train::TensorNumerics>& a = records[0].numerics;
  ASSERT_EQ(a.size(), 2u * (1 + 1 + 2 + 2));
  int kinds[4] = {};
  for (const train::TensorNumerics& n : a) {
    ++kinds[static_cast<int>(n.kind)];
    EXPECT_TRUE(n.layer == "fc0" || n.layer == "fc1") << n.layer;
    EXPECT_GT(n.nonzero(), 0);
  }
  EXPECT_EQ(kinds[static_cast<int>(train::TensorKind::activation)], 2);
  EXPECT_EQ(kinds[static_cast<int>(train::TensorKind::activation_grad)], 2);
  EXPECT_EQ(kinds[static_cast<int>(train::TensorKind::weight)], 4);
  EXPECT_EQ(kinds[static_cast<int>(train::TensorKind::weight_grad)], 4);
  // The same step with a loss scale of 1024: gradients measured the same once unscaled (f32: exact
  // for a power of 2).
  const std::vector<train::TensorNumerics>& b = records[1].numerics;
  ASSERT_EQ(b.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].layer, a[i].layer);
    EXPECT_EQ(b[i].amax, a[i].amax) << a[i].layer << " " << tensor_kind_name(a[i].kind);
    EXPECT_EQ(b[i].log2_counts, a[i].log2_counts);
  }
  EXPECT_EQ(b[0].loss_scale, 1024);
}

TEST(Telemetry, MicroBatchesAddIntoOneRecordPerTensor) {
  train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 16, .layers = 1, .classes = 10, .seed = 1}};
  train::ClassificationData data{load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 16, 0};
  train::TrainerOptions o;
  o.grad_accum = 3;
  o.telemetry = train::TelemetryPolicy{.every = 1, .kinds = {train::TensorKind::activation, train::TensorKind::activation_grad}};
  o.steps = 1;
  train::Trainer t(model, data, o);
  const train::StepRecord r = t.step();
  ASSERT_EQ(r.numerics.size(), 4u);  // fc0 and fc1, output and output gradient
  for (const train::TensorNumerics& n : r.numerics) {
    const std::int64_t width = n.layer == "fc0" ? 16 : 10;
    EXPECT_EQ(n.count, 3 * 16 * width) << n.layer;  // three micro-batches of 16
    std::int64_t binned = 0;
    for (const std::int64_t c : n.log2_counts) binned += c;
    EXPECT_EQ(binned, n.nonzero()) << n.layer;
  }
}

}  // namespace
}  // namespace mantissa
