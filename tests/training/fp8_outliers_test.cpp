// The case that decides between FP8 recipes: a layer whose input holds a "massive activation" (Sun et al.
// 2024: a few tokens, the first of a sequence most often, whose hidden states are thousands of times
// larger than the rest and nearly constant). Built here as a sink row of 2^24 in every channel added to
// an MLP's hidden batch before its middle layer and dropped after it, so that it changes nothing but the
// scales. One scale for the whole tensor (the delayed recipe) is set by that row, and the ordinary rows
// fall below e4m3's smallest values; a scale per 1 x 128 block (the block recipe) keeps them. (The sink
// follows the batch's 128 rows: the weight-gradient product quantizes its input in 128 x 1 blocks along
// the rows, and a sink inside such a block would take that block's precision there too.) Trained on Fashion-MNIST, the figures are printed (docs/results.md records them:
// `build/bin/training_tests --gtest_filter='Fp8Outliers*'`).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "mantissa/nn/models.h"
#include "mantissa/train/trainer.h"

namespace mantissa {
namespace {

class SinkMlp : public nn::Module {
 public:
  SinkMlp()
      : fc0_(register_module("fc0", std::make_shared<nn::Linear>(784, 256, 1))),
        fc1_(register_module("fc1", std::make_shared<nn::Linear>(256, 256, 11))),
        fc2_(register_module("fc2", std::make_shared<nn::Linear>(256, 10, 21))) {}
  Tensor forward(const Tensor& x) const {
    const Tensor h = relu(fc0_->forward(reshape(x, {x.size(0), -1})));
    const std::array<Tensor, 2> rows{h, Tensor::full({1, 256}, 1 << 24, h.dtype())};
    const Tensor with_sink = concat(rows, 0);
    const Tensor y = slice(fc1_->forward(with_sink), 0, 0, h.size(0));
    return fc2_->forward(relu(y));
  }

 private:
  std::shared_ptr<nn::Linear> fc0_, fc1_, fc2_;
};

struct Outcome {
  double accuracy;
  std::int64_t underflowed, quantized;
};

Outcome train_with(std::optional<QuantRecipe> recipe) {
  static const ImageDataset train_set = load_mnist_format(kFashionMnistDir, true);
  static const ImageDataset test_set = load_mnist_format(kFashionMnistDir, false);
  train::ModuleModel<SinkMlp> model;
  train::ClassificationData data(train_set, test_set, 128, 1);
  train::TrainerOptions o;
  o.precision = {DType::bf16};
  if (recipe) o.precision.fp8 = QuantOptions{.recipe = *recipe};
  o.optimizer = {.kind = train::OptimizerKind::adamw, .lr = 1e-3};
  o.steps = 300;
  o.eval_every = 300;
  train::Trainer trainer(model, data, o);
  std::int64_t underflowed = 0, quantized = 0;
  for (std::int64_t s = 0; s < o.steps; ++s) {
    const train::StepRecord r = trainer.step();
    if (r.fp8) underflowed += r.fp8->underflowed, quantized += r.fp8->quantized;
  }
  return {*trainer.evaluate(true).val_accuracy, underflowed, quantized};
}

TEST(Fp8Outliers, OneScalePerTensorLosesAccuracyThatBlockScalingKeeps) {
  const Outcome bf16 = train_with(std::nullopt);
  const Outcome delayed = train_with(QuantRecipe::delayed);
  const Outcome block = train_with(QuantRecipe::block);
  for (const auto& [name, r] : {std::pair{"bf16", bf16}, {"fp8 delayed", delayed}, {"fp8 block", block}}) {
    std::printf("%-12s test accuracy %.2f%%, underflowed %.1f%% of the values quantized\n", name, 100 * r.accuracy,
                r.quantized ? 100.0 * static_cast<double>(r.underflowed) / static_cast<double>(r.quantized) : 0.0);
  }
  EXPECT_GT(bf16.accuracy, 0.8);
  EXPECT_GT(block.accuracy, bf16.accuracy - 0.01);    // block scaling keeps bf16's accuracy
  EXPECT_LT(delayed.accuracy, block.accuracy - 0.03);  // one scale per tensor does not
  EXPECT_GT(delayed.underflowed, 10 * block.underflowed);
}

}  // namespace
}  // namespace mantissa
