// What the paper's experiments rest on (mantissa paper): the LSTM language model carries its state from
// one segment to the next and trains; autocast keeps its cell state in f32 unless told to run everything
// in low precision; and the lost-update measurement counts what rounding takes away from weights stored
// in 16 bits.
#include <gtest/gtest.h>

#include <cmath>

#include "mantissa/nn/models.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/train/trainer.h"

namespace mantissa {
namespace {

std::vector<std::int64_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST(LstmLm, CarriesItsStateAcrossSegmentsAndStopsGradientsAtTheirStart) {
  nn::LstmLm m(nn::LstmConfig{.vocab = 256, .embd = 8, .hidden = 12, .layers = 2, .seed = 3});
  const std::vector<std::int64_t> ids = bytes_of("abcdefgh");  // 2 rows of 4
  nn::LstmLm::State state;
  const Tensor first = m.forward(ids, 2, 4, state);
  ASSERT_EQ(first.shape(), (Shape{8, 256}));
  ASSERT_EQ(state.h.size(), 2U);
  EXPECT_FALSE(state.h[1].requires_grad());  // detached: the next segment's backward stops here
  const Tensor carried = m.forward(ids, 2, 4, state);
  nn::LstmLm::State fresh;
  const Tensor restarted = m.forward(ids, 2, 4, fresh);
  EXPECT_EQ(sum(abs(sub(restarted, first))).item(), 0.0);  // the same input from zero: the same logits
  EXPECT_GT(sum(abs(sub(carried, first))).item(), 1e-4);   // from the carried state: others
  // One segment's loss reaches every parameter.
  cross_entropy(carried, bytes_of("bcdefghi")).backward();
  for (const auto& [name, p] : m.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(LstmLm, KeepsTheCellStateInF32UnderAutocastUnlessEverythingRunsLow) {
  const Tensor xg = Tensor::uniform({3, 8}, DType::f32, 1, -2, 2);
  const Tensor hg = Tensor::uniform({3, 8}, DType::f32, 2, -2, 2);
  const Tensor c = Tensor::uniform({3, 2}, DType::bf16, 3, -1, 1);
  {
    Autocast ac(DType::bf16);
    EXPECT_EQ(lstm_cell(cast(xg, DType::bf16), cast(hg, DType::bf16), c).dtype(), DType::f32);
  }
  {
    Autocast ac(DType::f16, AutocastPolicy::all_low());
    EXPECT_EQ(lstm_cell(xg, hg, cast(c, DType::f32)).dtype(), DType::f16);
    // The loss too: its value rounded into the region's dtype.
    const Tensor logits = Tensor::uniform({4, 5}, DType::f32, 4, -2, 2);
    const std::int64_t t[] = {0, 1, 2, 3};
    const Tensor low = cross_entropy(logits, t);
    EXPECT_EQ(low.dtype(), DType::f16);
    Autocast off(std::nullopt);
    EXPECT_NEAR(low.item(), cross_entropy(logits, t).item(), 2e-3);
  }
}

TEST(LstmLm, LearnsARepeatingTextInBf16WithItsStateCarried) {
  TextCorpus corpus;
  const std::string line = "the quick brown fox jumps over the lazy dog. ";
  for (int i = 0; i < 40; ++i) corpus.train.insert(corpus.train.end(), line.begin(), line.end());
  for (int i = 0; i < 8; ++i) corpus.validation.insert(corpus.validation.end(), line.begin(), line.end());
  train::RecurrentModel<nn::LstmLm> model(nn::LstmConfig{.vocab = 256, .embd = 16, .hidden = 48, .layers = 1, .seed = 1});
  train::TextStreams data(corpus, 4, 16, 2, "repeating text");
  train::TrainerOptions o;
  o.precision = {DType::bf16, train::PrecisionMode::autocast};
  o.optimizer = {.kind = train::OptimizerKind::adamw, .lr = 1e-2, .weight_decay = 0};
  o.schedule = LrSchedule::warmup_cosine(1e-2, 0, 120, 1e-2);
  o.clip = 1;
  o.steps = 120;
  o.eval_every = 120;
  train::Trainer trainer(model, data, o);
  const train::TrainResult r = trainer.run();
  // From log(256) = 5.5 to a text it has learned by heart.
  EXPECT_LT(r.evals.back().val_loss, 1.0);
}

// A bf16 MLP without master weights, stepped by SGD with a learning rate so small that every update is
// far below half an ulp of its weight: all of them are lost; with a large one, none. The f32 run reports
// what bf16 and fp16 storage would lose.
TEST(LostUpdates, CountsTheUpdatesRoundingTakesAway) {
  const auto lost = [](DType dtype, bool master, double lr) {
    train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 784, .hidden = 16, .layers = 1, .classes = 10, .seed = 0});
    train::ClassificationData data(load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false), 32, 0);
    train::TrainerOptions o;
    o.precision = {dtype, dtype == DType::f32 ? train::PrecisionMode::autocast : train::PrecisionMode::low_precision_model};
    o.optimizer = {.kind = train::OptimizerKind::sgd, .lr = lr, .weight_decay = 0, .momentum = 0,
                   .master = {.enabled = master, .allow_pure_low_precision = !master}};
    o.schedule = LrSchedule::warmup_cosine(lr, 0, 2, lr);
    o.loss_scaling = {.kind = LossScaling::none};
    o.steps = 2;
    o.update_stats_every = 1;
    train::Trainer trainer(model, data, o);
    return trainer.step().lost_updates;
  };
  EXPECT_NEAR(lost(DType::bf16, false, 1e-7).at("bf16"), 1.0, 1e-3);
  EXPECT_LT(lost(DType::bf16, false, 10.0).at("bf16"), 0.01);
  const auto f32 = lost(DType::f32, true, 1e-4);
  // Updates around 1e-4 x gradient on weights around 0.03: bf16 (8 bits) loses far more than fp16 (11).
  EXPECT_GT(f32.at("bf16"), f32.at("fp16"));
  EXPECT_GT(f32.at("bf16"), 0.5);
}

}  // namespace
}  // namespace mantissa
