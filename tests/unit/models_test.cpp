// The module system and the models: parameter names and counts, train/eval, low-precision-model
// conversion keeping norms in f32, per-module precision overrides, GPT's causality and tied head, and
// each model learning a little.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "mantissa/autograd/watch.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/nn/models.h"
#include "mantissa/optim/optimizer.h"
#include "../../src/backend/registry.h"

namespace mantissa {
namespace {

using nn::Cnn;
using nn::Gpt;
using nn::Mlp;

TEST(Modules, NamedParametersAndCounts) {
  const Mlp mlp({.in = 784, .hidden = 256, .layers = 2, .classes = 10});
  const auto named = mlp.named_parameters();
  ASSERT_EQ(named.size(), 6U);
  EXPECT_EQ(named[0].first, "fc0.weight");
  EXPECT_EQ(named[0].second.shape(), (Shape{256, 784}));
  EXPECT_EQ(named[5].first, "fc2.bias");
  EXPECT_EQ(mlp.parameter_count(), 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);

  const std::int64_t c = 32, v = 256, t = 16, layers = 2;
  const Gpt gpt({.n_layer = layers, .n_head = 4, .n_embd = c, .block_size = t, .vocab = v});
  const std::int64_t block = 2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (4 * c * c + 4 * c) + (4 * c * c + c);
  EXPECT_EQ(gpt.parameter_count(), v * c + t * c + layers * block + 2 * c);  // the head is tied: no extra
  EXPECT_EQ(gpt.named_parameters()[2].first, "blocks.0.ln1.weight");

  const Cnn cnn({});
  EXPECT_EQ(cnn.named_buffers().size(), 12U);  // running mean and variance of six batch norms
}

TEST(Modules, LowPrecisionModelKeepsNormsInF32) {
  Cnn cnn({.width = 8});
  cnn.to_dtype(DType::bf16);
  for (const auto& [name, p] : cnn.named_parameters()) {
    const bool norm = name.find("bn") != std::string::npos;
    EXPECT_EQ(p.dtype(), norm ? DType::f32 : DType::bf16) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
  }
  for (const auto& [name, b] : cnn.named_buffers()) EXPECT_EQ(b.dtype(), DType::f32) << name;
  const Tensor x = Tensor::randn({2, 1, 28, 28}, DType::bf16, 1);
  EXPECT_EQ(cnn.forward(x).shape(), (Shape{2, 10}));
}

// The CPU's layer norm kernel, wrapped to record the dtype each call writes.
std::vector<DType> g_layer_norm_outputs;
detail::kernel::LayerNorm::Fn* g_layer_norm = nullptr;
void recording_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd) {
  g_layer_norm_outputs.push_back(y.dtype());
  g_layer_norm(x, gamma, beta, eps, y, mean, rstd);
}

// The same for the layer norm that adds a residual first.
detail::kernel::AddLayerNorm::Fn* g_add_layer_norm = nullptr;
void recording_add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& gamma, const Tensor& beta, double eps,
                              const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  g_layer_norm_outputs.push_back(y.dtype());
  g_add_layer_norm(x, r, gamma, beta, eps, s, y, mean, rstd);
}

// A GPT block's layer norms write their outputs in the dtype the products after them read
// (LayerNorm::forward_for): bf16 under a bf16 region, where the products' own casts would make it; f32
// outside autocast, and where the product after one is kept in f32. In call order: each block's ln1
// and ln2, then ln_f.
TEST(Gpt, LayerNormsWriteWhatTheProductsAfterThemRead) {
  (void)detail::impl_for(Device::cpu());  // every backend's kernels registered
  auto& slot = detail::KernelTable<detail::kernel::LayerNorm>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
  g_layer_norm = std::exchange(slot, &recording_layer_norm);
  auto& add_slot = detail::KernelTable<detail::kernel::AddLayerNorm>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
  g_add_layer_norm = std::exchange(add_slot, &recording_add_layer_norm);
  Gpt gpt({.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab = 32, .seed = 4});
  const std::vector<std::int64_t> ids = {1, 5, 9, 2, 7, 3, 30, 11}, targets = {5, 9, 2, 7, 3, 30, 11, 4};
  const auto outputs = [&] {
    g_layer_norm_outputs.clear();
    (void)gpt.loss(ids, 1, 8, targets);
    return g_layer_norm_outputs;
  };
  const DType bf16 = DType::bf16, f32 = DType::f32;
  {
    const Autocast region(bf16);
    EXPECT_EQ(outputs(), std::vector<DType>(5, bf16));
  }
  EXPECT_EQ(outputs(), std::vector<DType>(5, f32));
  for (const auto& [name, module] : gpt.named_modules()) {
    if (name == "blocks.1.mlp.fc") module->keep_in_f32();
  }
  {
    const Autocast region(bf16);
    EXPECT_EQ(outputs(), (std::vector<DType>{bf16, bf16, bf16, f32, bf16}));
  }
  slot = g_layer_norm;
  add_slot = g_add_layer_norm;
}

// Every layer norm of a GPT but the first adds the residual branch before it in its own pass
// (add_layer_norm); under the non-finite tracer, where the add must be an op of its own, none does. The
// values are the add's and the norm's, bit for bit (the two kernels in a row, on the CPU).
TEST(Gpt, LayerNormsAddTheResidualBeforeThemInTheirOwnPass) {
  (void)detail::impl_for(Device::cpu());
  auto& add_slot = detail::KernelTable<detail::kernel::AddLayerNorm>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
  g_add_layer_norm = std::exchange(add_slot, &recording_add_layer_norm);
  Gpt gpt({.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab = 32, .seed = 4});
  const std::vector<std::int64_t> ids = {1, 5, 9, 2, 7, 3, 30, 11}, targets = {5, 9, 2, 7, 3, 30, 11, 4};
  std::vector<double> loss[2];
  std::vector<std::vector<double>> grads[2];
  for (const bool traced : {false, true}) {
    set_trace_nonfinite(traced);
    g_layer_norm_outputs.clear();
    for (const auto& [name, p] : gpt.named_parameters()) p.zero_grad();
    const Autocast region(DType::bf16);
    const Tensor l = gpt.loss(ids, 1, 8, targets);
    l.backward();
    EXPECT_EQ(g_layer_norm_outputs.size(), traced ? 0U : 4U);  // ln2, ln1 of block 1, ln2, ln_f
    loss[traced] = l.to_doubles();
    for (const auto& [name, p] : gpt.named_parameters()) grads[traced].push_back(p.grad().to_doubles());
    set_trace_nonfinite(false);
  }
  EXPECT_EQ(loss[0], loss[1]);
  EXPECT_EQ(grads[0], grads[1]);
  add_slot = g_add_layer_norm;
}

// The CPU's fused GELU product, wrapped to count its calls.
int g_gelu_products = 0;
detail::kernel::MatmulGelu::Fn* g_matmul_gelu = nullptr;
void counting_matmul_gelu(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& pre, const Tensor& out) {
  ++g_gelu_products;
  g_matmul_gelu(a, w, bias, pre, out);
}

struct NullTap final : LayerTap {
  void activation(const std::string&, const Tensor&) override {}
  void activation_grad(const std::string&, const Tensor&) override {}
};

// Under --gelu tanh a block's MLP is one op (gelu_mlp) where both its layers run their products alike
// and nothing watches their own outputs; else fc, the GELU and proj, as before. Counted in forward passes.
TEST(Gpt, TheTanhMlpIsOneOpWhereBothLayersRunAlike) {
  (void)detail::impl_for(Device::cpu());
  auto& slot = detail::KernelTable<detail::kernel::MatmulGelu>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
  g_matmul_gelu = std::exchange(slot, &counting_matmul_gelu);
  const std::vector<std::int64_t> ids = {1, 5, 9, 2, 7, 3, 30, 11}, targets = {5, 9, 2, 7, 3, 30, 11, 4};
  const auto products = [&](const Gpt& gpt) {
    g_gelu_products = 0;
    const Autocast region(DType::bf16);
    (void)gpt.loss(ids, 1, 8, targets);
    return g_gelu_products;
  };
  const nn::GptConfig config{.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab = 32, .seed = 4};
  EXPECT_EQ(products(Gpt(config)), 0);  // the erf GELU: three ops
  nn::GptConfig tanh = config;
  tanh.gelu_tanh = true;
  Gpt gpt(tanh);
  EXPECT_EQ(products(gpt), 2);
  {
    set_trace_nonfinite(true);
    EXPECT_EQ(products(gpt), 0);
    set_trace_nonfinite(false);
  }
  {
    NullTap tap;
    const LayerTapGuard guard(&tap);
    EXPECT_EQ(products(gpt), 0);
  }
  for (const auto& [name, module] : gpt.named_modules()) {
    if (name == "blocks.1.mlp.proj") module->keep_in_f32();
  }
  EXPECT_EQ(products(gpt), 1);  // block 1's products run in f32 and bf16
  for (const auto& [name, module] : gpt.named_modules()) {
    if (name == "blocks.0.mlp.fc") dynamic_cast<nn::Linear&>(*module).enable_fp8(QuantOptions{.recipe = QuantRecipe::current});
  }
  EXPECT_EQ(products(gpt), 0);  // block 0's fc in FP8
  slot = g_matmul_gelu;
}

// The one op and the three give the same loss and gradients, up to f32's rounding (the tracer makes it
// three ops).
TEST(Gpt, TheTanhMlpAsOneOpLearnsAsTheThreeOps) {
  Gpt gpt({.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab = 32, .seed = 4, .gelu_tanh = true});
  const std::vector<std::int64_t> ids = {1, 5, 9, 2, 7, 3, 30, 11}, targets = {5, 9, 2, 7, 3, 30, 11, 4};
  std::vector<double> loss[2];
  std::vector<std::vector<double>> grads[2];
  for (const bool three_ops : {false, true}) {
    set_trace_nonfinite(three_ops);
    for (const auto& [name, p] : gpt.named_parameters()) p.zero_grad();
    const Tensor l = gpt.loss(ids, 1, 8, targets);
    l.backward();
    loss[three_ops] = l.to_doubles();
    for (const auto& [name, p] : gpt.named_parameters()) grads[three_ops].push_back(p.grad().to_doubles());
    set_trace_nonfinite(false);
  }
  EXPECT_NEAR(loss[0][0], loss[1][0], 1e-5 * std::fabs(loss[1][0]));
  for (std::size_t k = 0; k < grads[0].size(); ++k) {
    double scale = 0;
    for (double v : grads[1][k]) scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < grads[0][k].size(); ++i) {
      ASSERT_NEAR(grads[0][k][i], grads[1][k][i], 1e-4 * scale) << "parameter " << gpt.named_parameters()[k].first << " element " << i;
    }
  }
}

TEST(Modules, PerModulePrecisionOverride) {
  nn::Linear kept(8, 4, 1);
  nn::Linear low(8, 4, 2);
  kept.keep_in_f32();
  const Tensor x = Tensor::randn({3, 8}, DType::f32, 3);
  Autocast region(DType::bf16);
  EXPECT_EQ(low.forward(x).dtype(), DType::bf16);
  EXPECT_EQ(kept.forward(x).dtype(), DType::f32);
}

TEST(Modules, BatchNormUpdatesRunningStatisticsOnlyInTraining) {
  Cnn cnn({.width = 4});
  const Tensor x = Tensor::randn({4, 1, 28, 28}, DType::f32, 5);
  const std::vector<double> before = cnn.named_buffers()[0].second.to_doubles();
  cnn.eval();
  const std::vector<double> e1 = cnn.forward(x).to_doubles();
  EXPECT_EQ(cnn.named_buffers()[0].second.to_doubles(), before);
  EXPECT_EQ(cnn.forward(x).to_doubles(), e1);  // deterministic in evaluation
  cnn.train();
  cnn.forward(x);
  EXPECT_NE(cnn.named_buffers()[0].second.to_doubles(), before);
}

TEST(Gpt, LaterTokensDoNotChangeEarlierLogitsAndTheHeadIsTied) {
  const Gpt gpt({.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab = 256, .seed = 4});
  std::vector<std::int64_t> a = {72, 101, 108, 108, 111, 32, 119, 111};
  std::vector<std::int64_t> b = a;
  b[7] = 33;
  const std::vector<double> la = gpt.forward(a, 1, 8).to_doubles();
  const std::vector<double> lb = gpt.forward(b, 1, 8).to_doubles();
  for (std::size_t i = 0; i < 7 * 256; ++i) ASSERT_EQ(la[i], lb[i]) << i;
  bool last_differs = false;
  for (std::size_t i = 7 * 256; i < 8 * 256; ++i) last_differs = last_differs || la[i] != lb[i];
  EXPECT_TRUE(last_differs);
  EXPECT_THROW(gpt.forward(std::vector<std::int64_t>(9, 1), 1, 9), std::invalid_argument);
}

TEST(Models, EachLearnsOnAFixedBatch) {
  std::vector<std::int64_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const Tensor images = Tensor::randn({16, 1, 28, 28}, DType::f32, 6);
  const auto learns = [&](nn::Module& m, const std::function<Tensor()>& loss_fn, double lr) {
    Adam opt(m.parameters(), {.lr = lr});
    const double first = loss_fn().item();
    for (int s = 0; s < 15; ++s) {
      loss_fn().backward();
      opt.step();
      opt.zero_grad();
    }
    return loss_fn().item() < 0.7 * first;
  };
  Mlp mlp({.hidden = 32, .layers = 1});
  EXPECT_TRUE(learns(mlp, [&] { return cross_entropy(mlp.forward(images), labels); }, 1e-2));
  Cnn cnn({.width = 8});
  EXPECT_TRUE(learns(cnn, [&] { return cross_entropy(cnn.forward(images), labels); }, 1e-2));
  Gpt gpt({.n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab = 256});
  std::vector<std::int64_t> ids = {72, 101, 108, 108, 111, 32, 119, 111};
  std::vector<std::int64_t> next = {101, 108, 108, 111, 32, 119, 111, 114};
  EXPECT_TRUE(learns(gpt, [&] { return cross_entropy(gpt.forward(ids, 1, 8), next); }, 3e-2));
}

}  // namespace
}  // namespace mantissa
