// Data-parallel training, library level. ctest runs this program twice: as one process, and under
// `mpirun -np 2`, where every rank runs every test and the tests that need two ranks compare them: the
// collectives, the gradient reduction against its definition (each wire format, bit for bit), a 2-rank run
// against one process with the same global batch, skipped steps on every rank when one rank overflows, and
// the weight checksum catching ranks that drift apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mantissa/dist/grad_reducer.h"
#include "mantissa/dist/process_group.h"
#include "mantissa/nn/models.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/data_parallel.h"
#include "mantissa/train/trainer.h"

namespace mantissa {
namespace {

using dist::ProcessGroup;

std::shared_ptr<ProcessGroup> world() {
  static const std::shared_ptr<ProcessGroup> g = [] {
    auto group = ProcessGroup::from_environment();
    group->set_timeout(120);  // a broken test stops the job instead of hanging ctest
    return group;
  }();
  return g;
}

#define NEEDS_TWO_RANKS() \
  if (world()->size() < 2) GTEST_SKIP() << "needs 2 ranks (ctest also runs this program under mpirun -np 2)"

// The value as the wire format holds it (f32: itself).
float through(DType wire, float v) { return wire == DType::f32 ? v : round_to(format_of(wire), v); }

TEST(Collectives, ReduceBroadcastGatherAndAllToAllGiveEveryRankTheSameValues) {
  ProcessGroup& g = *world();
  const int n = g.size(), r = g.rank();
  std::array<double, 2> v{static_cast<double>(r + 1), -static_cast<double>(r)};
  g.all_reduce(v, dist::ReduceOp::sum);
  EXPECT_EQ(v[0], n * (n + 1) / 2.0);
  EXPECT_EQ(v[1], -n * (n - 1) / 2.0);
  std::array<double, 1> m{static_cast<double>(r * 10)};
  g.all_reduce(m, dist::ReduceOp::max);
  EXPECT_EQ(m[0], (n - 1) * 10.0);

  std::array<int, 3> b{r, r * 2, 7};
  g.broadcast(std::as_writable_bytes(std::span(b)), 0);
  EXPECT_EQ(b, (std::array<int, 3>{0, 0, 7}));

  const std::array<int, 2> mine{r, 100 + r};
  std::vector<int> all(2 * static_cast<std::size_t>(n));
  g.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(all[2 * i], i);
    EXPECT_EQ(all[2 * i + 1], 100 + i);
  }

  // Block j of rank r's send holds 10 r + j; rank r receives 10 j + r from rank j.
  std::vector<int> send(static_cast<std::size_t>(n)), recv(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) send[j] = 10 * r + j;
  const std::int64_t before = g.bytes_sent();
  g.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(recv)));
  for (int j = 0; j < n; ++j) EXPECT_EQ(recv[j], 10 * j + r);
  EXPECT_EQ(g.bytes_sent() - before, static_cast<std::int64_t>(sizeof(int)) * (n - 1));
  g.barrier();
}

// Rank r's gradient of parameter i: normal values spread over 2^-30..2^12, so every wire format rounds
// (and fp16 flushes some to subnormals and zero).
Tensor rank_gradient(const Tensor& p, int rank, std::size_t i) {
  const Tensor g = Tensor::randn(p.shape(), DType::f32, 1000 * static_cast<std::uint64_t>(rank) + i);
  const Tensor e = Tensor::uniform(p.shape(), DType::f32, 77 + 1000 * static_cast<std::uint64_t>(rank) + i, -30, 12);
  std::vector<float> v(static_cast<std::size_t>(p.numel()));
  const std::vector<double> gv = g.to_doubles(), ev = e.to_doubles();
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(gv[k] * std::exp2(std::floor(ev[k])));
  Tensor out = Tensor::empty(p.shape(), DType::f32);
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return p.dtype() == DType::f32 ? out : cast(out, p.dtype());
}

class ReducerWire : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(ReducerWire, AveragesEveryRanksGradientsAsDefinedBitForBit) {
  const auto [wire, dtype] = GetParam();
  ProcessGroup& g = *world();
  const int n = g.size();
  std::vector<Tensor> params;
  for (const Shape& s : {Shape{37}, Shape{5, 13}, Shape{300}, Shape{2, 2}}) {
    params.push_back(Tensor::zeros(s, dtype).set_requires_grad(true));
  }
  // Small buckets: several of them, launched as their gradients arrive (in the hook's order).
  dist::GradReducer reducer(world(), params, {.wire = wire, .bucket_bytes = 256, .overlap = true});
  EXPECT_GE(reducer.buckets(), 3);
  reducer.begin();
  for (std::size_t i = params.size(); i-- > 0;) {
    params[i].set_grad(rank_gradient(params[i], g.rank(), i));
    reducer.ready(params[i]);
  }
  const dist::ReducerStats stats = reducer.finish();
  EXPECT_EQ(stats.buckets, reducer.buckets());
  for (std::size_t i = 0; i < params.size(); ++i) {
    // The definition: each rank's value rounded to the wire, added in f32 in rank order, divided by the
    // number of ranks, rounded to the wire, then to the gradient's dtype.
    std::vector<std::vector<double>> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(rank_gradient(params[i], r, i).to_doubles());
    const std::vector<double> got = params[i].grad().to_doubles();
    for (std::size_t k = 0; k < got.size(); ++k) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += through(wire, static_cast<float>(ranks[r][k]));
      const float mean = through(wire, sum / static_cast<float>(n));
      const float want = dtype == DType::f32 ? mean : through(dtype, mean);
      ASSERT_EQ(static_cast<double>(want), got[k]) << "parameter " << i << " element " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WireAndGradient, ReducerWire,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Values(DType::f32, DType::bf16)));

TEST(Reducer, SendsHalfTheBytesInBf16AndFp16) {
  NEEDS_TWO_RANKS();
  std::vector<Tensor> params{Tensor::zeros({1000}, DType::f32).set_requires_grad(true),
                             Tensor::zeros({24, 10}, DType::f32).set_requires_grad(true)};
  std::map<DType, std::int64_t> bytes;
  for (const DType wire : {DType::f32, DType::bf16, DType::f16}) {
    dist::GradReducer reducer(world(), params, {.wire = wire, .bucket_bytes = 1 << 20, .overlap = false});
    reducer.begin();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].set_grad(rank_gradient(params[i], world()->rank(), i));
    bytes[wire] = reducer.finish().bytes_sent;
  }
  // All-to-all and all-gather each send (n-1)/n of the bucket: 2 (n-1)/n x 1240 elements.
  const std::int64_t n = world()->size();
  EXPECT_EQ(bytes[DType::f32], 2 * (n - 1) * ((1240 + n - 1) / n) * 4);
  EXPECT_EQ(bytes[DType::bf16] * 2, bytes[DType::f32]);
  EXPECT_EQ(bytes[DType::f16] * 2, bytes[DType::f32]);
}

TEST(Reducer, SendsBucketsWhileBackwardRuns) {
  // A real backward with the reducer as its hook: the buckets of the last layers go before backward ends,
  // and the averaged gradients are those of the ranks' batches.
  nn::Mlp mlp(nn::MlpConfig{.in = 36, .hidden = 64, .layers = 3, .classes = 4, .seed = 5});
  const std::vector<Tensor> params = mlp.parameters();
  dist::GradReducer reducer(world(), params, {.bucket_bytes = 4096});
  const auto loss_of = [&](int rank) {
    const Tensor x = Tensor::randn({8, 36}, DType::f32, 50 + static_cast<std::uint64_t>(rank));
    return cross_entropy(mlp.forward(x), std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 3});
  };
  // Each rank's own gradients, for the expected mean.
  std::vector<std::vector<double>> sum(params.size());
  for (int r = 0; r < world()->size(); ++r) {
    loss_of(r).backward();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::vector<double> g = params[i].grad().to_doubles();
      sum[i].resize(g.size());
      for (std::size_t k = 0; k < g.size(); ++k) sum[i][k] += g[k];
      params[i].zero_grad();
    }
  }
  reducer.begin();
  {
    const GradReadyHookGuard hook(&reducer);
    loss_of(world()->rank()).backward();
  }
  const dist::ReducerStats stats = reducer.finish();
  EXPECT_GE(reducer.buckets(), 3);
  EXPECT_EQ(stats.launched_in_backward, reducer.buckets()) << "every bucket is whole when its last gradient arrives";
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::vector<double> g = params[i].grad().to_doubles();
    for (std::size_t k = 0; k < g.size(); ++k) {
      ASSERT_NEAR(g[k], sum[i][k] / world()->size(), 1e-6 * (1 + std::abs(sum[i][k]))) << "parameter " << i;
    }
  }
}

TEST(Reducer, GivesUnusedParametersZeroGradientsOnEveryRank) {
  std::vector<Tensor> params{Tensor::zeros({8}, DType::f32).set_requires_grad(true),
                             Tensor::zeros({8}, DType::f32).set_requires_grad(true)};
  dist::GradReducer reducer(world(), params, {});
  reducer.begin();
  params[0].set_grad(Tensor::full({8}, 2.0, DType::f32));
  reducer.ready(params[0]);
  reducer.finish();
  EXPECT_EQ(params[0].grad().to_doubles(), std::vector<double>(8, 2.0));
  ASSERT_TRUE(params[1].grad().defined());
  EXPECT_EQ(params[1].grad().to_doubles(), std::vector<double>(8, 0.0));
}

TEST(ShardBatch, SplitsRowsWithTheirTargets) {
  train::Batch images;
  images.inputs = Tensor::randn({6, 1, 2, 2}, DType::f32, 3);
  images.targets = {0, 1, 2, 3, 4, 5};
  const train::Batch second = train::shard_batch(images, 1, 3, true);
  EXPECT_EQ(second.targets, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(second.inputs.to_doubles(), slice(images.inputs, 0, 2, 4).to_doubles());

  train::Batch tokens;  // 4 sequences of 3 tokens, a target per token
  tokens.rows = 4;
  tokens.length = 3;
  for (int i = 0; i < 12; ++i) {
    tokens.tokens.push_back(i);
    tokens.targets.push_back(100 + i);
  }
  tokens.stream = 0;
  tokens.stream_start = false;
  const train::Batch last = train::shard_batch(tokens, 1, 2, true);
  EXPECT_EQ(last.rows, 2);
  EXPECT_EQ(last.tokens, (std::vector<std::int64_t>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(last.targets.front(), 106);
  EXPECT_FALSE(last.stream_start);
  try {
    train::shard_batch(tokens, 0, 3, true);
    FAIL() << "4 rows over 3 ranks must be refused in training";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not split evenly over 3 ranks"), std::string::npos) << e.what();
  }
  EXPECT_EQ(train::shard_batch(tokens, 2, 3, false).rows, 2);  // evaluation: rows 2..3
}

// A small learnable image task: labels from a fixed random linear map of the pixels.
ImageDataset teacher_images(std::int64_t n, std::uint64_t seed) {
  ImageDataset d;
  d.images = Tensor::randn({n, 1, 6, 6}, DType::f32, seed);
  const Tensor w = Tensor::randn({36, 4}, DType::f32, 99);
  const std::vector<double> logits = matmul(reshape(d.images, {n, 36}), w).to_doubles();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto row = logits.begin() + i * 4;
    d.labels.push_back(std::max_element(row, row + 4) - row);
  }
  d.classes = 4;
  return d;
}

struct RunRecord {
  std::vector<double> losses;
  std::vector<bool> skipped;
  std::vector<double> scales;
  std::vector<double> weights;
  double val_loss = 0;
};

// `steps` steps of an MLP on the teacher task, global batch 32, with or without data parallel.
RunRecord train_mlp(std::optional<train::DataParallelOptions> dp, DType compute, std::int64_t steps,
              std::vector<std::int64_t> inject = {}) {
  train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 36, .hidden = 64, .layers = 2, .classes = 4, .seed = 5});
  train::ClassificationData data(teacher_images(512, 1), teacher_images(96, 2), 32, 7);
  train::TrainerOptions o;
  o.precision = {compute};
  o.optimizer.lr = 3e-3;
  o.steps = steps;
  o.eval_every = steps;
  o.inject_nonfinite = std::move(inject);
  o.data_parallel = std::move(dp);
  train::Trainer trainer(model, data, o);
  RunRecord run;
  const train::TrainResult r = trainer.run();
  for (const train::StepRecord& s : r.steps) {
    run.losses.push_back(s.loss);
    run.skipped.push_back(s.skipped);
    run.scales.push_back(s.loss_scale);
  }
  for (const Tensor& p : model.module().parameters()) {
    const std::vector<double> v = p.to_doubles();
    run.weights.insert(run.weights.end(), v.begin(), v.end());
  }
  run.val_loss = r.evals.back().val_loss;
  return run;
}

class TwoRanksFollowOne : public ::testing::TestWithParam<DType> {};

TEST_P(TwoRanksFollowOne, LossesAndWeightsWithinTheWireFormatsTolerance) {
  NEEDS_TWO_RANKS();
  const DType wire = GetParam();
  constexpr std::int64_t kSteps = 30;
  // Each wire format with the compute dtype that goes with it: fp16 gradients travel loss-scaled.
  const DType compute = wire;
  const RunRecord one = train_mlp(std::nullopt, compute, kSteps);
  const RunRecord two = train_mlp(train::DataParallelOptions{.group = world(), .reducer = {.wire = wire}, .checksum_every = 10},
                                  compute, kSteps);
  // f32 on the wire: only the order of the sums differs (a batch's mean from two halves), so the runs agree
  // to f32's rounding, amplified a little over 30 Adam steps: u = 2^-17 covers it. bf16/fp16: each averaged
  // gradient is rounded twice to the wire format (a relative error of at most 2u, u = 2^-8 or 2^-11, its
  // unit roundoff), and the half-batch products round differently in the compute format too; Adam passes a
  // relative gradient error on to the update, so the weights drift apart by a few u of their size over the
  // run (measured: 4u bf16, 10u fp16) and the losses by less (0.2u, 0.9u): bounds 16u and 4u.
  const double u = wire == DType::f32 ? std::exp2(-17) : wire == DType::bf16 ? std::exp2(-8) : std::exp2(-11);
  double worst_loss = 0;
  for (std::int64_t i = 0; i < kSteps; ++i) {
    worst_loss = std::max(worst_loss, std::abs(two.losses[i] - one.losses[i]) / one.losses[i]);
  }
  double apart = 0, size = 0;
  for (std::size_t i = 0; i < one.weights.size(); ++i) {
    apart += (two.weights[i] - one.weights[i]) * (two.weights[i] - one.weights[i]);
    size += one.weights[i] * one.weights[i];
  }
  EXPECT_LE(worst_loss, 4 * u) << "the loss curves part";
  EXPECT_LE(std::sqrt(apart / size), 16 * u) << "the weights part";
  EXPECT_NEAR(two.val_loss, one.val_loss, 4 * u * one.val_loss);
  EXPECT_LT(one.losses.back(), 0.7 * one.losses.front()) << "the task was learned";
}

INSTANTIATE_TEST_SUITE_P(Wire, TwoRanksFollowOne, ::testing::Values(DType::f32, DType::bf16, DType::f16));

TEST(DataParallel, EveryRankSkipsTheStepsOneRankOverflowsAndKeepsTheSameScale) {
  NEEDS_TWO_RANKS();
  // fp16 with dynamic scaling; rank 1 alone gets an inf in a gradient at steps 3 and 5.
  const RunRecord run = train_mlp(train::DataParallelOptions{.group = world(), .checksum_every = 1, .inject_rank = 1},
                            DType::f16, 8, {3, 5});
  for (std::size_t i = 0; i < run.skipped.size(); ++i) EXPECT_EQ(run.skipped[i], i == 2 || i == 4) << "step " << i + 1;
  EXPECT_EQ(run.scales[3], run.scales[2] / 2);  // each record has the scale its step ran at; it backs off after
  // The same on every rank: skips, scales and (the checksum every step passed) the weights.
  std::vector<double> mine(run.scales);
  for (bool s : run.skipped) mine.push_back(s ? 1 : 0);
  std::vector<double> high(mine), low(mine);
  world()->all_reduce(high, dist::ReduceOp::max);
  world()->all_reduce(low, dist::ReduceOp::min);
  EXPECT_EQ(high, low);
}

// FP8 with delayed scaling: each rank sees its own rows' amaxes, but the ranks reduce them (the
// largest) before every history update, so every rank keeps the same histories and scales.
TEST(DataParallel, Fp8DelayedScalingKeepsTheSameScalesOnEveryRank) {
  NEEDS_TWO_RANKS();
  train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 36, .hidden = 64, .layers = 3, .classes = 4, .seed = 5});
  train::ClassificationData data(teacher_images(512, 1), teacher_images(96, 2), 32, 7);
  train::TrainerOptions o;
  o.precision = {DType::bf16};
  o.precision.fp8 = QuantOptions{.amax_history = 4};
  o.steps = 6;
  o.data_parallel = train::DataParallelOptions{.group = world(), .checksum_every = 1};
  train::Trainer trainer(model, data, o);
  for (int s = 0; s < 6; ++s) trainer.step();
  std::vector<double> mine;
  for (const auto& [name, b] : model.module().named_buffers()) {
    if (name.find("fp8_") == std::string::npos) continue;
    const std::vector<double> v = b.to_doubles();
    mine.insert(mine.end(), v.begin(), v.end());
  }
  ASSERT_FALSE(mine.empty()) << "no FP8 layer";
  EXPECT_GT(*std::max_element(mine.begin(), mine.end()), 1.0) << "no scale was computed";
  std::vector<double> high(mine), low(mine);
  world()->all_reduce(high, dist::ReduceOp::max);
  world()->all_reduce(low, dist::ReduceOp::min);
  EXPECT_EQ(high, low);
}

// One rank asked to stop (its Ctrl-C) during step 3: every rank ends the run after step 3, agreed with
// the step's other values (no collective of its own).
TEST(DataParallel, TheRanksStopTogetherAfterTheStepInWhichOneWasAskedTo) {
  NEEDS_TWO_RANKS();
  train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 36, .hidden = 16, .layers = 2, .classes = 4, .seed = 5});
  train::ClassificationData data(teacher_images(256, 1), teacher_images(64, 2), 32, 7);
  train::TrainerOptions o;
  o.steps = 10;
  o.eval_every = 100;
  o.data_parallel = train::DataParallelOptions{.group = world(), .checksum_every = 1};
  train::Trainer trainer(model, data, o);
  int asked = 0;
  const bool me = world()->rank() == 1;
  const train::TrainResult r = trainer.run({.should_stop = [&] { return me && ++asked == 3; }});
  EXPECT_EQ(r.stopped_at, 3);
  EXPECT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(trainer.next_step(), 4);
}

TEST(DataParallel, StopsWhenTheRanksWeightsDiffer) {
  NEEDS_TWO_RANKS();
  train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 36, .hidden = 16, .layers = 1, .classes = 4, .seed = 5});
  train::ClassificationData data(teacher_images(128, 1), teacher_images(32, 2), 16, 7);
  train::TrainerOptions o;
  o.steps = 10;
  o.data_parallel = train::DataParallelOptions{.group = world(), .checksum_every = 1};
  train::Trainer trainer(model, data, o);
  trainer.step();
  trainer.step();
  if (world()->rank() == 1) {  // a rank drifts (as a bug, a bad node or different settings would make it)
    Tensor w = model.module().parameters().front();
    w.data_as<float>()[3] += 1e-3f;
  }
  try {
    trainer.step();
    FAIL() << "the checksum missed the difference";
  } catch (const dist::DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("weights differ after step 3"), std::string::npos) << e.what();
  }
}

// A run shorter than its checksum interval is still checked: after its last step.
TEST(DataParallel, TheWeightsAreComparedAfterTheLastStepToo) {
  NEEDS_TWO_RANKS();
  train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 36, .hidden = 16, .layers = 1, .classes = 4, .seed = 5});
  train::ClassificationData data(teacher_images(128, 1), teacher_images(32, 2), 16, 7);
  train::TrainerOptions o;
  o.steps = 3;
  o.data_parallel = train::DataParallelOptions{.group = world(), .checksum_every = 100};
  train::Trainer trainer(model, data, o);
  trainer.step();
  trainer.step();
  if (world()->rank() == 1) model.module().parameters().front().data_as<float>()[3] += 1e-3f;
  try {
    (void)trainer.run();
    FAIL() << "the last step's weights were not compared";
  } catch (const dist::DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("weights differ after step 3"), std::string::npos) << e.what();
  }
}

// Ranks built with other settings stop in the Trainer's constructor, every one of them, naming the first
// setting that differs: before any broadcast (a parameter of another shape would overrun it).
TEST(DataParallel, RanksWithOtherSettingsStopBeforeAnythingIsExchanged) {
  NEEDS_TWO_RANKS();
  const bool one = world()->rank() == 1;
  const auto refusal = [](train::TrainerOptions o, std::int64_t hidden) {
    train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 36, .hidden = hidden, .layers = 1, .classes = 4, .seed = 5});
    train::ClassificationData data(teacher_images(64, 1), teacher_images(32, 2), 16, 7);
    o.data_parallel = train::DataParallelOptions{.group = world(), .settings = {{"--flag", "same"}}};
    try {
      train::Trainer trainer(model, data, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  train::TrainerOptions o;
  EXPECT_EQ(refusal(o, 16), "accepted");
  const std::string shape = refusal(o, one ? 8 : 16);
  EXPECT_NE(shape.find("rank 1's settings differ from rank 0's: parameter fc0.weight (rank 0: [16, 36])"), std::string::npos) << shape;
  EXPECT_EQ(shape.find("this rank") != std::string::npos, one) << shape;
  o.optimizer.lr = one ? 2e-3 : 1e-3;
  const std::string lr = refusal(o, 16);
  EXPECT_NE(lr.find("rank 1's settings differ from rank 0's: lr (rank 0: 0.001000)"), std::string::npos) << lr;
}

TEST(DataParallel, RefusesAdaptivePrecision) {
  NEEDS_TWO_RANKS();
  train::ModuleModel<nn::Mlp> model(nn::MlpConfig{.in = 36, .hidden = 16, .layers = 1, .classes = 4, .seed = 5});
  train::ClassificationData data(teacher_images(64, 1), teacher_images(32, 2), 16, 7);
  train::TrainerOptions o;
  o.precision = {DType::bf16};
  o.adaptive = train::AdaptiveOptions{};
  o.data_parallel = train::DataParallelOptions{.group = world()};
  EXPECT_THROW(train::Trainer(model, data, o), std::invalid_argument);
}

}  // namespace
}  // namespace mantissa
