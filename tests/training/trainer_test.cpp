// train::Trainer as a C++ user drives it: checkpoints written before the training loop moved into the
// library still resume, a save/resume round trip continues bit-identically, micro-batches accumulate
// to the whole batch's step, a token model is evaluated through its own loss, and options out of range
// are refused.
#include <gtest/gtest.h>

#include <random>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "../common/scratch_dir.h"
#include "mantissa/io/checkpoint.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/nn/models.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/train/trainer.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;


// What `mantissa train --model mlp --hidden 4 --layers 1 --precision bf16 --mode low-precision-model
// --steps 5 --batch-size 16 --stochastic-rounding` builds (the fixtures were written by that command
// before this issue moved the loop into the library).
struct FixtureRun {
  train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 4, .layers = 1, .classes = 10, .seed = 0}};
  train::ClassificationData data{load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 16, 0};
  train::Trainer trainer{model, data, options()};

  static train::TrainerOptions options() {
    train::TrainerOptions o;
    o.precision = {DType::bf16, train::PrecisionMode::low_precision_model};
    o.optimizer = {.kind = train::OptimizerKind::adamw, .lr = 1e-3, .weight_decay = 0.01,
                   .master = {true, Rounding::stochastic, 17, false}};
    o.schedule = LrSchedule::warmup_cosine(1e-3, 0, 5, 1e-4);
    o.steps = 5;
    return o;
  }
};

TEST(Trainer, ResumesACheckpointTheCommandWroteBeforeTheLoopMovedIntoTheLibrary) {
  const fs::path fixtures = fs::path(MANTISSA_SOURCE_DIR) / "tests" / "fixtures";
  FixtureRun run;
  run.trainer.resume(fixtures / "mlp-bf16-lpm-step3.safetensors");
  EXPECT_EQ(run.trainer.next_step(), 4);
  run.trainer.step();
  run.trainer.step();
  const fs::path dir = testing::scratch_dir("trainer_fixture");
  run.trainer.save(dir / "step5.safetensors");
  // The old command's own step 5: the same tensors, the same data position and loss-scaler state. Values
  // agree to bf16 rounding (kernels on another CPU may sum in another order, so not bit for bit).
  const Safetensors want = read_safetensors(fixtures / "mlp-bf16-lpm-step5.safetensors");
  const Safetensors got = read_safetensors(dir / "step5.safetensors");
  for (const char* key : {"step", "optim_step", "data_epoch", "data_position", "loss_scaler"}) {
    EXPECT_EQ(got.metadata.at(key), want.metadata.at(key)) << key;
  }
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (std::size_t i = 0; i < want.tensors.size(); ++i) {
    const auto& [name, w] = want.tensors[i];
    const auto& [got_name, g] = got.tensors[i];
    ASSERT_EQ(got_name, name);
    ASSERT_EQ(g.dtype(), w.dtype()) << name;
    ASSERT_EQ(g.shape(), w.shape()) << name;
    const std::vector<double> a = g.to_doubles(), b = w.to_doubles();
    for (std::size_t j = 0; j < a.size(); ++j) {
      ASSERT_NEAR(a[j], b[j], 1e-2 * std::fabs(b[j]) + 1e-6) << name << "[" << j << "]";
    }
  }
  fs::remove_all(dir);
}

TEST(Trainer, SaveAndResumeContinueBitIdentically) {
  const fs::path dir = testing::scratch_dir("trainer_resume");
  FixtureRun whole;
  for (int i = 0; i < 5; ++i) whole.trainer.step();
  whole.trainer.save(dir / "whole.safetensors");
  {
    FixtureRun first;
    for (int i = 0; i < 2; ++i) first.trainer.step();
    first.trainer.save(dir / "part.safetensors");
  }
  FixtureRun second;
  second.trainer.resume(dir / "part.safetensors");
  for (int i = 0; i < 3; ++i) second.trainer.step();
  second.trainer.save(dir / "resumed.safetensors");
  const Safetensors a = read_safetensors(dir / "whole.safetensors"), b = read_safetensors(dir / "resumed.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].second.to_doubles(), b.tensors[i].second.to_doubles()) << a.tensors[i].first;
  }
  EXPECT_EQ(a.metadata, b.metadata);
  fs::remove_all(dir);
}

// Two micro-batches of 8 make the same f32 step as one batch of their 16 examples (the gradients add up
// to the mean's, to f32 rounding).
TEST(Trainer, MicroBatchesAccumulateToTheWholeBatchsStep) {
  const ImageDataset train_set = load_mnist_format(kFashionMnistDir, true);
  const auto run = [&](std::int64_t batch, std::int64_t accum) {
    auto model = std::make_unique<train::ModuleModel<nn::Mlp>>(nn::MlpConfig{.in = 784, .hidden = 16, .layers = 1});
    train::ClassificationData data(train_set, train_set, batch, 0, /*shuffle=*/false);
    train::TrainerOptions o;
    o.optimizer = {.kind = train::OptimizerKind::sgd, .lr = 0.5, .weight_decay = 0, .momentum = 0};
    o.grad_accum = accum;
    train::Trainer trainer(*model, data, o);
    const double loss = trainer.step().loss;
    std::vector<double> params;
    for (const Tensor& p : model->module().parameters()) {
      const std::vector<double> v = p.to_doubles();
      params.insert(params.end(), v.begin(), v.end());
    }
    return std::pair{loss, params};
  };
  const auto [loss1, whole] = run(16, 1);
  const auto [loss2, accumulated] = run(8, 2);
  EXPECT_NEAR(loss1, loss2, 1e-6);
  ASSERT_EQ(whole.size(), accumulated.size());
  double worst = 0;
  for (std::size_t i = 0; i < whole.size(); ++i) worst = std::max(worst, std::fabs(whole[i] - accumulated[i]));
  EXPECT_LT(worst, 1e-6);
  // And the step moved the weights (a step that did nothing would pass the comparison).
  auto fresh = std::make_unique<train::ModuleModel<nn::Mlp>>(nn::MlpConfig{.in = 784, .hidden = 16, .layers = 1});
  EXPECT_NE(fresh->module().parameters().front().to_doubles(), std::vector<double>(whole.begin(), whole.begin() + 16 * 784));
}

// A module with a loss of its own: ModuleModel hands loss() and loss_sum() to it, with their reduction.
struct LossProbe : nn::Module {
  mutable std::vector<Reduction> asked;
  Tensor forward(std::span<const std::int64_t> /*ids*/, std::int64_t rows, std::int64_t length) const {
    return Tensor::zeros({rows * length, 3}, DType::f32);
  }
  Tensor loss(std::span<const std::int64_t> /*ids*/, std::int64_t /*rows*/, std::int64_t /*length*/,
              std::span<const std::int64_t> /*targets*/, Reduction reduction) const {
    asked.push_back(reduction);
    return Tensor::full({}, reduction == Reduction::sum ? 2.0 : 1.0, DType::f32);
  }
};

TEST(Trainer, ModuleModelHandsBothLossesToAModuleWithItsOwn) {
  train::ModuleModel<LossProbe> model;
  train::Batch b;
  b.tokens = {1, 2};
  b.rows = 1;
  b.length = 2;
  b.targets = {2, 0};
  EXPECT_EQ(model.loss(b).item(), 1.0);
  EXPECT_EQ(model.loss_sum(b).item(), 2.0);
  EXPECT_EQ(model.get().asked, (std::vector<Reduction>{Reduction::mean, Reduction::sum}));
}

// The GPT over the fortunes, counting the calls of forward().
class CountingGpt final : public train::Model {
 public:
  nn::Module& module() override { return gpt_.module(); }
  Tensor forward(const train::Batch& b) override {
    ++forwards;
    return gpt_.forward(b);
  }
  Tensor loss(const train::Batch& b) override { return gpt_.loss(b); }
  Tensor loss_sum(const train::Batch& b) override { return gpt_.loss_sum(b); }
  int forwards = 0;

 private:
  train::ModuleModel<nn::Gpt> gpt_{nn::GptConfig{.n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 16, .seed = 3}};
};

// The plateau at the text's byte entropy (issue 50): on text whose bytes are independent draws from a
// skewed distribution, nothing but their frequencies can be learned, so the loss settles at the byte
// entropy and stays; after plateau_patience steps there the step's warning says so, once. On text with
// context to learn (a repeated sentence) the loss goes on below it, and nothing is said. The advice is a
// warm-up where the run has none (what brought the char GPT off the plateau: docs/results.md).
std::vector<std::string> plateau_warnings(std::vector<std::uint8_t> text, double* entropy, std::int64_t warmup = 0) {
  train::ModuleModel<nn::Gpt> gpt{nn::GptConfig{.n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 16, .seed = 3}};
  train::TextData data(TextCorpus::from_bytes(std::move(text), "text"), 32, 16, 0, 2, "text");
  *entropy = *data.byte_entropy();
  train::TrainerOptions o;
  o.optimizer = {.kind = train::OptimizerKind::adamw, .lr = 1e-2};
  o.steps = 150;
  if (warmup > 0) o.schedule = LrSchedule::warmup_cosine(1e-2, warmup, 150, 1e-3);
  o.plateau_patience = 20;
  train::Trainer trainer(gpt, data, o);
  std::vector<std::string> warnings;
  for (int i = 0; i < 150; ++i) {
    const train::StepRecord r = trainer.step();
    if (!r.warning.empty()) warnings.push_back(r.warning);
  }
  return warnings;
}

TEST(Trainer, SaysOnceWhenTheLossStaysAtTheTextsByteEntropy) {
  std::mt19937_64 rng(50);
  std::discrete_distribution<int> skewed({40, 20, 10, 10, 5, 5, 5, 5});
  std::vector<std::uint8_t> noise(40000);
  for (std::uint8_t& b : noise) b = static_cast<std::uint8_t>('a' + skewed(rng));
  double h = 0;
  const std::vector<std::string> said = plateau_warnings(noise, &h);
  // (The training split's entropy: the distribution's, 1.748 nats, within a sample's noise.)
  EXPECT_NEAR(h, 1.7481, 0.02);
  ASSERT_EQ(said.size(), 1u);
  char nats[32];
  std::snprintf(nats, sizeof nats, "%.3f", h);
  EXPECT_NE(said[0].find("byte entropy (" + std::string(nats) + " nats)"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("by its frequency alone"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("in fp32 as much as in bf16"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("To do: warm the learning rate up (--warmup 20"), std::string::npos) << said[0];
  const std::vector<std::string> warmed = plateau_warnings(noise, &h, 10);
  ASSERT_EQ(warmed.size(), 1u);
  EXPECT_EQ(warmed[0].find("--warmup 20"), std::string::npos) << warmed[0];
  EXPECT_NE(warmed[0].find("lengthen the warm-up"), std::string::npos) << warmed[0];

  std::string sentence;
  while (sentence.size() < 40000) sentence += "the quick brown fox jumps over the lazy dog; ";
  EXPECT_TRUE(plateau_warnings({sentence.begin(), sentence.end()}, &h).empty());
}

// Evaluating a token model adds up its own loss (the GPT's never makes a whole batch's logits on a GPU)
// and gets the mean cross-entropy of the logits that forward() makes, in bf16 autocast as in f32.
TEST(Trainer, EvaluatesATokenModelThroughItsOwnLossToTheMeanOfItsLogits) {
  for (const DType compute : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(compute));
    CountingGpt model;
    train::TextData data(TextCorpus::load(kFortunesDir), 4, 16, 0, 3, "fortunes");
    train::TrainerOptions o;
    o.precision = {compute, train::PrecisionMode::autocast};
    o.steps = 2;
    train::Trainer trainer(model, data, o);
    trainer.step();
    trainer.step();
    const int before = model.forwards;
    const double got = trainer.evaluate(true).val_loss;
    EXPECT_EQ(model.forwards, before) << "evaluation made the logits";
    double sum = 0;
    std::int64_t count = 0;
    {
      NoGradGuard no_grad;
      std::optional<Autocast> region;  // the trainer's: autocast's default policy in the compute dtype
      if (compute != DType::f32) region.emplace(compute, AutocastPolicy::defaults());
      data.for_each_eval_batch(true, [&](const train::Batch& b) {
        sum += cross_entropy(cast(model.forward(b), DType::f32), b.targets, Reduction::sum).item();
        count += static_cast<std::int64_t>(b.targets.size());
      });
    }
    EXPECT_EQ(count, 3 * 4 * 16);
    EXPECT_NEAR(got, sum / static_cast<double>(count), 1e-6 * sum / static_cast<double>(count));
    EXPECT_GT(got, 1.0);  // an untrained byte model: far from zero, so the comparison means something
  }
}

TEST(Trainer, OptionsOutOfRangeAreRefused) {
  train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 4, .hidden = 4, .layers = 1, .classes = 2});
  const ImageDataset set{Tensor::randn({8, 4}, DType::f32, 1), {0, 1, 0, 1, 0, 1, 0, 1}, 2};
  train::ClassificationData data(set, set, 4, 0);
  const auto refused = [&](train::TrainerOptions o) {
    EXPECT_THROW(train::Trainer(model, data, o), std::invalid_argument);
  };
  refused({.steps = 0});
  refused({.grad_accum = 0});
  refused({.eval_every = 0});
  refused({.precision = {DType::f32, train::PrecisionMode::low_precision_model}});
  refused({.precision = {DType::f64}});
  EXPECT_THROW(train::parse_precision("fp8"), std::invalid_argument);
  // Any case, and PyTorch's names for the same dtypes.
  for (const char* bf16 : {"bf16", "BF16", "bfloat16", "BFloat16"}) EXPECT_EQ(train::parse_precision(bf16), DType::bf16) << bf16;
  for (const char* f16 : {"fp16", "FP16", "f16", "float16", "half"}) EXPECT_EQ(train::parse_precision(f16), DType::f16) << f16;
  for (const char* f32 : {"fp32", "f32", "float32", "Float"}) EXPECT_EQ(train::parse_precision(f32), DType::f32) << f32;
  EXPECT_EQ(train::parse_precision_policy("NVFP4").fp8->recipe, QuantRecipe::nvfp4);
  EXPECT_THROW(train::parse_loss_scaling("static:0", DType::f16), std::invalid_argument);
  EXPECT_EQ(train::parse_loss_scaling("", DType::f16).kind, LossScaling::dynamic);
  EXPECT_EQ(train::parse_loss_scaling("", DType::bf16).kind, LossScaling::none);
  EXPECT_EQ(train::parse_loss_scaling("deepspeed", DType::f16).hysteresis, 2);
  // More ops in f32 need a low compute dtype to be more than f32's.
  train::PrecisionPolicy attention_f32{DType::f32};
  train::set_fp32_ops(attention_f32, "attention");
  refused({.precision = attention_f32});
}

// --fp32-ops's words: autocast's f32 list, none, or the list with more ops, each named once in the label,
// the autocast policy and the setting a checkpoint keeps; an op already in f32 or unknown is refused.
TEST(Trainer, Fp32OpsAddOpsToAutocastsF32List) {
  train::PrecisionPolicy p{DType::bf16};
  const auto setting = [&p](std::string_view words) {
    train::set_fp32_ops(p, words);
    return train::fp32_ops_setting(p);
  };
  EXPECT_EQ(setting("default"), "default");
  EXPECT_EQ(p.label(), "bf16 autocast");
  EXPECT_EQ(setting("none"), "none");
  EXPECT_EQ(p.label(), "bf16 autocast (no fp32 ops)");
  EXPECT_EQ(p.autocast_policy().precision(AutocastOp::softmax), AutocastPrecision::low);
  EXPECT_EQ(setting("linear_cross_entropy,default,attention,attention"), "default,attention,linear_cross_entropy");
  EXPECT_EQ(p.label(), "bf16 autocast (attention, linear_cross_entropy in fp32)");
  EXPECT_EQ(p.autocast_policy().precision(AutocastOp::attention), AutocastPrecision::f32);
  EXPECT_EQ(p.autocast_policy().precision(AutocastOp::softmax), AutocastPrecision::f32);
  EXPECT_EQ(p.autocast_policy().precision(AutocastOp::linear), AutocastPrecision::low);
  EXPECT_EQ(setting("attention"), "default,attention");
  for (const char* bad : {"none,attention", "softmax", "attn", "", "default,"}) {
    EXPECT_THROW(train::set_fp32_ops(p, bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(train::fp32_ops_setting(p), "default,attention");  // a refused word changes nothing
}

}  // namespace
}  // namespace mantissa
