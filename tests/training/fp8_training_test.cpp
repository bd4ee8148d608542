// FP8 training through train::Trainer: each recipe (the microscaled ones too) trains an MLP on
// Fashion-MNIST about as far as bf16 does, the delayed recipe's amax histories and scales and NVFP4's
// stochastic-rounding count travel in checkpoints and a resume continues bit for bit, each layer reports
// its counts, and a checkpoint of another recipe, or one whose FP8 state no run writes, is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <utility>

#include "../../src/backend/registry.h"
#include "../common/scratch_dir.h"
#include "mantissa/io/checkpoint.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/nn/models.h"
#include "mantissa/train/trainer.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;


const ImageDataset& train_images() {
  static const ImageDataset set = load_mnist_format(kFashionMnistDir, true);
  return set;
}

// An MLP with three hidden layers (two of its four linear layers in FP8 by the default policy).
struct MlpRun {
  train::ModuleModel<nn::Mlp> model{nn::MlpConfig{.in = 784, .hidden = 64, .layers = 3, .classes = 10, .seed = 3}};
  train::ClassificationData data{train_images(), train_images(), 64, 5};
  train::Trainer trainer;

  explicit MlpRun(std::optional<QuantOptions> fp8, std::int64_t steps = 40)
      : trainer(model, data, options(std::move(fp8), steps)) {}

  static train::TrainerOptions options(std::optional<QuantOptions> fp8, std::int64_t steps) {
    train::TrainerOptions o;
    o.precision = {DType::bf16, train::PrecisionMode::autocast, std::move(fp8)};
    o.optimizer = {.kind = train::OptimizerKind::adamw, .lr = 2e-3};
    o.steps = steps;
    return o;
  }
  // The mean loss of the last 10 of n steps.
  double train_loss(int n) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const double l = trainer.step().loss;
      if (i >= n - 10) sum += l;
    }
    return sum / 10;
  }
};

TEST(Fp8Training, EveryRecipeTrainsAsFarAsBf16) {
  const double bf16 = MlpRun(std::nullopt).train_loss(40);
  for (QuantRecipe r : {QuantRecipe::delayed, QuantRecipe::current, QuantRecipe::block}) {
    MlpRun run(QuantOptions{.recipe = r});
    ASSERT_EQ(run.trainer.precision_plan().str(),
              "fp8 in 2 of 4 layers (" + std::string(r.name()) + "): fc1, fc2; bf16 in 2: fc0 (first layer), fc3 (last layer)");
    const double fp8 = run.train_loss(40);
    EXPECT_NEAR(fp8, bf16, 0.05 * bf16) << r.name();
    EXPECT_LT(fp8, 1.0) << r.name();  // it learned (the first steps' loss is about 2.3)
  }
}

// The microscaled recipes (every row of the table) train the MLP too: 8-bit elements about as far as
// bf16, narrower ones within a wider margin (they lose more; still far below the first steps' 2.3).
TEST(Fp8Training, TheMicroscaledRecipesTrainNearBf16) {
  const double bf16 = MlpRun(std::nullopt).train_loss(40);
  for (const QuantRecipe r : QuantRecipe::all()) {
    if (!r.info().microscaled()) continue;
    const double margin = r.info().forward.bits() >= 8 ? 0.05 : 0.25;
    MlpRun run(QuantOptions{.recipe = r});
    const double loss = run.train_loss(40);
    EXPECT_NEAR(loss, bf16, margin * bf16) << r.name();
    EXPECT_LT(loss, 1.2) << r.name();
  }
}

// Each recipe's counts per layer: the FP8 layers' shares add up to the step's total.
TEST(Fp8Training, EachLayerReportsItsShareOfTheQuantizationCounts) {
  for (QuantRecipe r : {QuantRecipe::delayed, QuantRecipe::mxfp4, QuantRecipe::nvfp4}) {
    MlpRun run(QuantOptions{.recipe = r});
    run.trainer.step();
    const train::StepRecord rec = run.trainer.step();
    ASSERT_TRUE(rec.fp8.has_value());
    ASSERT_EQ(rec.fp8_layers.size(), 2u) << r.name();
    std::int64_t quantized = 0, underflowed = 0;
    for (const auto& [path, c] : rec.fp8_layers) {
      EXPECT_GT(c.quantized, 0) << path;
      quantized += c.quantized;
      underflowed += c.underflowed;
    }
    EXPECT_EQ(quantized, rec.fp8->quantized) << r.name();
    EXPECT_EQ(underflowed, rec.fp8->underflowed) << r.name();
  }
}

// The CPU's block quantizer, wrapped to count its calls with and without `counts` (BlockQuantize's place
// for counts that the caller reads later), and those without a `factor` (its place for the tensor scale
// that the product reads where it lies).
detail::kernel::BlockQuantize::Fn* g_block_quantize = nullptr;
int g_with_counts = 0, g_without_counts = 0, g_without_factor = 0;
detail::Fp8QuantizeStats counting_block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given,
                                                 const Tensor& out, const Tensor& counts, const Tensor& factor) {
  ++(counts.defined() ? g_with_counts : g_without_counts);
  g_without_factor += !factor.defined();
  return g_block_quantize(x, spec, seed, given, out, counts, factor);
}

// Inside a training step every quantization leaves its counts and amax on the device for the step's one
// read (core/batched_reads.h), in every recipe: on a GPU, reading each back waited ~140 times a GPT-2
// step. Outside a step (evaluation) they come back at once. The counts are the same either way: the
// tests above read them through the step. Every quantization leaves its tensor scale on the device too,
// for its product to read there (current scaling read each one back before).
TEST(Fp8Training, InAStepEveryQuantizerLeavesItsCountsForTheStepsOneRead) {
  (void)detail::impl_for(Device::cpu());  // every backend's kernels registered
  auto& fn = detail::KernelTable<detail::kernel::BlockQuantize>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
  g_block_quantize = std::exchange(fn, &counting_block_quantize);
  for (const QuantRecipe r : QuantRecipe::all()) {
    MlpRun run(QuantOptions{.recipe = r});
    g_with_counts = g_without_counts = g_without_factor = 0;
    for (int i = 0; i < 2; ++i) run.trainer.step();
    EXPECT_GE(g_with_counts, 2 * 2 * 3) << r.name();  // two steps, two FP8 layers, three products
    EXPECT_EQ(g_without_counts, 0) << r.name();
    EXPECT_EQ(g_without_factor, 0) << r.name();
    const train::StepRecord rec = run.trainer.step();
    ASSERT_TRUE(rec.fp8.has_value());
    EXPECT_GT(rec.fp8->quantized, 0) << r.name();
    g_with_counts = g_without_counts = 0;
    (void)run.trainer.evaluate(false);
    EXPECT_EQ(g_with_counts, 0) << r.name();
    EXPECT_GT(g_without_counts, 0) << r.name();
  }
  fn = g_block_quantize;
}

// A run of 2n steps, and one of n steps saved, resumed in a fresh process-like run and continued n more:
// every tensor of their final checkpoints compared (values), and the whole run's checkpoint returned.
// `before_resume` may rewrite the saved part (an older checkpoint's words) before the resume reads it.
Safetensors expect_resume_bit_identical(const QuantOptions& o, int n, const std::string& name,
                                        const std::function<void(const fs::path&)>& before_resume = {}) {
  const fs::path dir = testing::scratch_dir(name);
  MlpRun whole(o);
  for (int i = 0; i < 2 * n; ++i) whole.trainer.step();
  whole.trainer.save(dir / "whole.safetensors");
  {
    MlpRun first(o);
    for (int i = 0; i < n; ++i) first.trainer.step();
    first.trainer.save(dir / "part.safetensors");
  }
  if (before_resume) before_resume(dir / "part.safetensors");
  MlpRun second(o);
  second.trainer.resume(dir / "part.safetensors");
  for (int i = 0; i < n; ++i) second.trainer.step();
  second.trainer.save(dir / "resumed.safetensors");
  Safetensors a = read_safetensors(dir / "whole.safetensors");
  const Safetensors b = read_safetensors(dir / "resumed.safetensors");
  EXPECT_EQ(a.tensors.size(), b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size() && i < b.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].second.to_doubles(), b.tensors[i].second.to_doubles()) << a.tensors[i].first;
  }
  EXPECT_EQ(a.metadata, b.metadata);
  fs::remove_all(dir);
  return a;
}

// NVFP4's stochastic rounding draws from a count each layer keeps; checkpoints carry it, so a resumed
// run rounds as the uninterrupted one did, bit for bit.
TEST(Fp8Training, Nvfp4StochasticRoundingResumesBitIdentically) {
  const Safetensors a = expect_resume_bit_identical(QuantOptions{.recipe = QuantRecipe::nvfp4}, 2, "nvfp4_resume");
  // Two draws a step in each FP8 layer (the data- and the weight-gradient products' gradients).
  const Tensor* calls = a.find("model/fc1.fp8_rounding_calls");
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(calls->to_doubles(), std::vector<double>{8.0});
}

// The other recipes keep no state but a stochastic-rounding count: each resumes bit for bit too, and so
// does a recipe given a stochastic spec of its own (its count travels in the checkpoint).
TEST(Fp8Training, EveryOtherRecipeResumesBitIdentically) {
  QuantOptions own{.recipe = QuantRecipe::current};
  own.specs[static_cast<std::size_t>(Fp8Operand::grad_output)] = QuantSpec::parse("e5m2 1x32 e8m0 rceil stochastic");
  for (const QuantOptions& o : {QuantOptions{.recipe = QuantRecipe::current}, QuantOptions{.recipe = QuantRecipe::block, .block = 16},
                              QuantOptions{.recipe = QuantRecipe::mxfp8}, QuantOptions{.recipe = QuantRecipe::mxfp4}, own}) {
    SCOPED_TRACE(o.str());
    const Safetensors a = expect_resume_bit_identical(o, 2, "recipe_resume");
    const Tensor* calls = a.find("model/fc1.fp8_rounding_calls");
    EXPECT_EQ(calls != nullptr, o.keeps_rounding_count());
    // Two draws a step in each FP8 layer where the output gradient rounds stochastically.
    if (calls != nullptr && o.specs[2]) {
      EXPECT_EQ(calls->to_doubles(), std::vector<double>{8.0});
    }
  }
}

// "nvfp4" is Transformer Engine's NVFP4 since issue 53; before, it was what the table now calls
// "nvfp4-torchao". A checkpoint from then (no "recipe_names" in its metadata, "nvfp4" in its words)
// resumes as nvfp4-torchao, bit for bit, and is refused by a run of today's nvfp4, which names the
// recipe the checkpoint computed.
TEST(Fp8Training, AnNvfp4CheckpointFromBeforeTesRuleResumesAsNvfp4Torchao) {
  const auto as_before = [](const fs::path& part) {
    Safetensors f = read_safetensors(part);
    ASSERT_EQ(f.metadata.erase("recipe_names"), 1u);
    std::string& fp8 = f.metadata.at("fp8");
    ASSERT_TRUE(fp8.starts_with("nvfp4-torchao (")) << fp8;
    fp8.erase(5, 8);  // "nvfp4 (...)", as such a checkpoint says it, and so in its plan
    std::string& plan = f.metadata.at("precision_plan");
    const std::string word = "\"recipe\":\"nvfp4-torchao\"";
    ASSERT_NE(plan.find(word), std::string::npos) << plan;
    plan.replace(plan.find(word), word.size(), "\"recipe\":\"nvfp4\"");
    write_safetensors(part, f.tensors, f.metadata);
    MlpRun today(QuantOptions{.recipe = QuantRecipe::nvfp4});
    try {
      today.trainer.resume(part);
      FAIL() << "resumed an old nvfp4 checkpoint as TE's nvfp4";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("written by a run with fp8 nvfp4-torchao ("), std::string::npos) << e.what();
    }
  };
  const Safetensors a = expect_resume_bit_identical(QuantOptions{.recipe = QuantRecipe::nvfp4_torchao}, 2, "nvfp4_legacy", as_before);
  EXPECT_EQ(a.metadata.at("recipe_names"), "2");  // (and the resumed run's, the metadata being equal)
}

TEST(Fp8Training, TheDelayedRecipesStateResumesBitIdentically) {
  const Safetensors a = expect_resume_bit_identical(QuantOptions{.recipe = QuantRecipe::delayed, .amax_history = 4}, 3, "fp8_resume");
  int fp8_tensors = 0;
  for (const auto& [name, t] : a.tensors) fp8_tensors += name.find("fp8_") != std::string::npos ? 1 : 0;
  EXPECT_EQ(fp8_tensors, 4);  // history and scales of the two FP8 layers
  // Six steps filled fc1's history of four: every row has an input amax (column 0).
  const Tensor* h = a.find("model/fc1.fp8_amax_history");
  ASSERT_NE(h, nullptr);
  const std::vector<double> v = h->to_doubles();
  for (int r = 0; r < 4; ++r) EXPECT_GT(v[static_cast<std::size_t>(r * 3)], 0) << "row " << r;
}

TEST(Fp8Training, ACheckpointOfAnotherRecipeOrWithAnImpossibleHistoryIsRefused) {
  const fs::path dir = testing::scratch_dir("fp8_refuse");
  {
    MlpRun run(QuantOptions{.recipe = QuantRecipe::delayed});
    run.trainer.step();
    run.trainer.save(dir / "delayed.safetensors");
  }
  MlpRun block(QuantOptions{.recipe = QuantRecipe::block});
  try {
    block.trainer.resume(dir / "delayed.safetensors");
    FAIL() << "resumed a delayed-scaling checkpoint with block scaling";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("written by a run with fp8 delayed"), std::string::npos) << e.what();
  }
  MlpRun bf16(std::nullopt);
  EXPECT_THROW(bf16.trainer.resume(dir / "delayed.safetensors"), CheckpointError);

  // A history with a negative amax (no run writes one): refused, naming the layer.
  Safetensors f = read_safetensors(dir / "delayed.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors = f.tensors;
  for (auto& [name, t] : tensors) {
    if (name == "model/fc1.fp8_amax_history") t.data_as<float>()[0] = -1;
  }
  write_safetensors(dir / "tampered.safetensors", tensors, f.metadata);
  MlpRun delayed(QuantOptions{.recipe = QuantRecipe::delayed});
  try {
    delayed.trainer.resume(dir / "tampered.safetensors");
    FAIL() << "resumed a history with a negative amax";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("fc1: fp8 amax history"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mantissa
