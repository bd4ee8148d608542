// Autocast: each op category runs in the documented precision, products accumulate in f32, each
// parameter is cast once per region, regions nest and switch off, policies override and print, and
// gradients of f32 parameters arrive in f32.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "mantissa/optim/optimizer.h"
#include "source_scan.h"

namespace mantissa {
namespace {

TEST(Autocast, EachOpCategoryRunsInItsPrecision) {
  const Tensor a = Tensor::randn({4, 8}, DType::f32, 1);
  const Tensor w = Tensor::randn({8, 3}, DType::f32, 2);
  const Tensor h = Tensor::randn({4, 3}, DType::bf16, 3);
  const std::int64_t targets[] = {0, 1, 2, 1};
  for (DType low : {DType::bf16, DType::f16}) {
    Autocast region(low);
    EXPECT_EQ(autocast_dtype(), low);
    EXPECT_EQ(matmul(a, w).dtype(), low);                              // low precision
    EXPECT_EQ(linear(a, transpose(w, 0, 1)).dtype(), low);
    EXPECT_EQ(softmax(h).dtype(), DType::f32);                         // f32
    EXPECT_EQ(log_softmax(h).dtype(), DType::f32);
    EXPECT_EQ(layer_norm(h, Tensor::full({3}, 1, DType::f32), Tensor::zeros({3}, DType::f32)).dtype(), DType::f32);
    EXPECT_EQ(cross_entropy(h, targets).dtype(), DType::f32);
    EXPECT_EQ(sum(h).dtype(), DType::f32);
    EXPECT_EQ(exp(h).dtype(), DType::f32);
    EXPECT_EQ(add(h, Tensor::zeros({4, 3}, DType::f32)).dtype(), DType::f32);  // promote to the wider
    EXPECT_EQ(relu(h).dtype(), DType::bf16);                           // inputs' dtype
  }
  EXPECT_EQ(autocast_dtype(), std::nullopt);
  EXPECT_EQ(matmul(a, w).dtype(), DType::f32);
}

// The largest |a - b| of two tensors of any dtype, in f64.
double max_difference(const Tensor& a, const Tensor& b) {
  return amax(abs(sub(cast(a, DType::f64), cast(b, DType::f64)))).item();
}

// Attention and the GPT's fused head are ops of their own to autocast (issue 50 keeps one or the other in
// f32): low precision by default, as the products they are; with the policy's f32 they compute exactly what
// they compute outside any region on f32 inputs, whatever dtype their inputs come in.
TEST(Autocast, AttentionAndTheFusedHeadRunInF32WhereThePolicySays) {
  const Tensor qkv = Tensor::randn({2, 5, 24}, DType::f32, 31);
  const Tensor x = Tensor::randn({6, 8}, DType::f32, 32);
  const Tensor w = Tensor::randn({10, 8}, DType::f32, 33).set_requires_grad();
  const std::int64_t targets[] = {0, 3, 9, 1, 4, 4};
  const Tensor f32_attention = self_attention(qkv, 2);
  const Tensor f32_loss = linear_cross_entropy(x, w, targets);
  for (DType low : {DType::bf16, DType::f16}) {
    {
      Autocast region(low);
      const Tensor attention = self_attention(qkv, 2);
      EXPECT_EQ(attention.dtype(), low);
      EXPECT_GT(max_difference(attention, f32_attention), 0.0);
      EXPECT_GT(max_difference(linear_cross_entropy(x, w, targets), f32_loss), 0.0);
    }
    for (const AutocastOp op : {AutocastOp::attention, AutocastOp::linear_cross_entropy}) {
      AutocastPolicy policy = AutocastPolicy::defaults();
      policy.set(op, AutocastPrecision::f32);
      Autocast region(low, policy);
      const bool attention_f32 = op == AutocastOp::attention;
      const Tensor attention = self_attention(cast(qkv, low), 2);  // low-precision inputs, as a product leaves them
      EXPECT_EQ(attention.dtype(), attention_f32 ? DType::f32 : low) << autocast_op_name(op);
      if (attention_f32) {
        EXPECT_EQ(max_difference(attention, self_attention(cast(cast(qkv, low), DType::f32), 2)), 0.0);
      }
      const Tensor loss = linear_cross_entropy(x, w, targets);
      EXPECT_EQ(max_difference(loss, f32_loss) == 0.0, !attention_f32) << autocast_op_name(op);
      EXPECT_EQ(matmul(x, transpose(w, 0, 1)).dtype(), low);  // the rest as before
    }
  }
  EXPECT_EQ(parse_autocast_op("attention"), AutocastOp::attention);
  EXPECT_EQ(parse_autocast_op("linear_cross_entropy"), AutocastOp::linear_cross_entropy);
  EXPECT_EQ(parse_autocast_op("Attention"), std::nullopt);
  for (std::size_t i = 0; i < kAutocastOps; ++i) {
    EXPECT_EQ(parse_autocast_op(autocast_op_name(static_cast<AutocastOp>(i))), static_cast<AutocastOp>(i));
  }
}

TEST(Autocast, BatchNormKeepsALowPrecisionInputsDtypeAndComputesInF32) {
  // As PyTorch's autocast on CUDA: batch norm runs in its input's dtype with f32 parameters and
  // statistics, so a conv's bf16 output is normalized without an f32 copy saved for backward. The
  // result is the f32 computation rounded once.
  const Tensor x = Tensor::randn({4, 3, 5, 5}, DType::bf16, 11);
  Tensor gamma = Tensor::randn({3}, DType::f32, 12).set_requires_grad();
  Tensor beta = Tensor::randn({3}, DType::f32, 13).set_requires_grad();
  Tensor mean = Tensor::zeros({3}, DType::f32), var = Tensor::full({3}, 1, DType::f32);
  Tensor y;
  {
    Autocast region(DType::bf16);
    y = batch_norm(x, gamma, beta, mean, var, true, 0.1, 1e-5);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  Tensor mean32 = Tensor::zeros({3}, DType::f32), var32 = Tensor::full({3}, 1, DType::f32);
  const Tensor want = cast(batch_norm(cast(x, DType::f32), gamma.detach(), beta.detach(), mean32, var32, true, 0.1, 1e-5),
                           DType::bf16);
  EXPECT_EQ(y.to_doubles(), want.to_doubles());
  EXPECT_EQ(mean.to_doubles(), mean32.to_doubles());  // the running statistics stay f32, the same
  sum(cast(y, DType::f32)).backward();
  EXPECT_EQ(gamma.grad().dtype(), DType::f32);
  EXPECT_EQ(beta.grad().dtype(), DType::f32);
}

TEST(Autocast, ProductsAccumulateInF32) {
  // 1 + 4095 terms of 2^-9: in bf16 each 2^-9 would be lost against 1 (half an ulp is 2^-8); in f32
  // the sum is 8.998..., which bf16 rounds to 9.
  constexpr std::int64_t k = 4096;
  std::vector<double> ones(k, 1.0);
  std::vector<double> b(k, std::ldexp(1.0, -9));
  b[0] = 1;
  const Tensor x = Tensor::from_values(ones, {1, k}, DType::f32);
  const Tensor y = Tensor::from_values(b, {k, 1}, DType::f32);
  Autocast region(DType::bf16);
  const Tensor r = matmul(x, y);
  EXPECT_EQ(r.dtype(), DType::bf16);
  EXPECT_EQ(r.item(), 9.0);
}

TEST(Autocast, EachParameterIsCastOncePerRegionAndGradientsArriveInF32) {
  Tensor w = Tensor::randn({6, 5}, DType::f32, 4).set_requires_grad();
  const Tensor x = Tensor::randn({2, 5}, DType::f32, 5);
  Tensor loss;
  {
    Autocast region(DType::bf16);
    const Tensor y1 = linear(x, w);
    const Tensor y2 = linear(x, w);  // the same weight again: the cached cast
    EXPECT_EQ(autocast_cache_size(), 1U);
    loss = sum(add(y1, y2));
  }
  EXPECT_EQ(autocast_cache_size(), 0U);  // cleared with the region
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  // d/dw of sum(2 x w^T) = 2 * column sums of x, per output row; x was cast to bf16 in the region, and
  // the product giving d(w cast) ran in bf16: two bf16 roundings (2^-8 each, relative) before the f32 cast.
  const std::vector<double> xs = cast(cast(x, DType::bf16), DType::f64).to_doubles();
  const std::vector<double> g = w.grad().to_doubles();
  for (std::int64_t o = 0; o < 6; ++o) {
    for (std::int64_t i = 0; i < 5; ++i) {
      const double want = 2 * (xs[static_cast<std::size_t>(i)] + xs[static_cast<std::size_t>(5 + i)]);
      EXPECT_NEAR(g[static_cast<std::size_t>(o * 5 + i)], want, std::ldexp(std::fabs(want), -7) + 1e-6);
    }
  }
}

TEST(Autocast, RegionsNestSwitchOffAndTakePolicies) {
  const Tensor a = Tensor::randn({2, 4}, DType::f32, 6);
  const Tensor b = Tensor::randn({4, 2}, DType::f32, 7);
  Autocast outer(DType::bf16);
  {
    Autocast off(std::nullopt);
    EXPECT_EQ(autocast_dtype(), std::nullopt);
    EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
    {
      Autocast inner(DType::f16);
      EXPECT_EQ(matmul(a, b).dtype(), DType::f16);
    }
  }
  EXPECT_EQ(matmul(a, b).dtype(), DType::bf16);
  // Keep matmul in f32 inside this region ("keep this layer in f32"), softmax in its input dtype.
  AutocastPolicy keep = AutocastPolicy::defaults();
  keep.set(AutocastOp::matmul, AutocastPrecision::f32).set(AutocastOp::softmax, AutocastPrecision::input);
  Autocast custom(DType::bf16, keep);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
  EXPECT_EQ(softmax(cast(a, DType::bf16)).dtype(), DType::bf16);
  const std::string table = keep.str();
  EXPECT_NE(table.find("matmul"), std::string::npos);
  EXPECT_NE(table.find("softmax               its inputs' dtype"), std::string::npos) << table;
  EXPECT_THROW(Autocast(DType::e4m3), std::invalid_argument);
}

TEST(Autocast, NestedRegionsWithParametersUseCastsOfTheirOwnDtype) {
  // The cast cache is keyed on (parameter, dtype): after a nested bf16 region, the outer f16 region
  // gets its f16 cast again (a cache keyed on the parameter alone returned the bf16 cast, and linear
  // then promoted to f32).
  Tensor w = Tensor::randn({3, 4}, DType::f32, 21).set_requires_grad();
  const Tensor x = Tensor::randn({2, 4}, DType::f32, 22);
  Autocast outer(DType::f16);
  EXPECT_EQ(linear(x, w).dtype(), DType::f16);
  {
    Autocast inner(DType::bf16);
    EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
  }
  EXPECT_EQ(linear(x, w).dtype(), DType::f16);
  EXPECT_EQ(autocast_cache_size(), 2u);  // one cast per dtype, each made once
  EXPECT_EQ(linear(x, w).to_doubles(), linear(x, w).to_doubles());
}

TEST(Autocast, AParameterUpdatedInPlaceInsideARegionIsCastAgain) {
  Tensor w = Tensor::full({2, 2}, 1.0, DType::f32).set_requires_grad();
  const Tensor x = Tensor::full({1, 2}, 1.0, DType::f32);
  Sgd opt({w}, SgdOptions{.lr = 1.0});
  Autocast region(DType::bf16);
  EXPECT_EQ(linear(x, w).to_doubles(), (std::vector<double>{2, 2}));
  w.set_grad(Tensor::full({2, 2}, 0.5, DType::f32));
  opt.step();  // w = 0.5 everywhere, in place
  EXPECT_EQ(linear(x, w).to_doubles(), (std::vector<double>{1, 1}));  // not the cast of the old w
}

// Backward runs each op in the dtypes its forward used, whatever region backward() is called in (as
// PyTorch's does): an f32 layer's gradients stay f32 products even inside a bf16 region.
TEST(Autocast, BackwardInsideARegionKeepsTheForwardDtypes) {
  const auto grads = [](bool backward_in_region) {
    Tensor w = Tensor::randn({6, 5}, DType::f32, 8).set_requires_grad();
    Tensor b = Tensor::randn({6}, DType::f32, 9).set_requires_grad();
    Tensor x = Tensor::randn({3, 5}, DType::f32, 10).set_requires_grad();
    const Tensor loss = sum(mul(linear(x, w, b), linear(x, w, b)));  // f32 forward, outside autocast
    if (backward_in_region) {
      Autocast region(DType::bf16);
      loss.backward();
    } else {
      loss.backward();
    }
    return std::vector<std::vector<double>>{w.grad().to_doubles(), b.grad().to_doubles(), x.grad().to_doubles()};
  };
  EXPECT_EQ(grads(true), grads(false));
}

}  // namespace
// Autocast is asked by the ops alone: a layer reads its own plan entry (its FP8 state) and hands it to
// the op, which asks once for the weight and follows the answer (linear()). A layer that asked for
// itself would be a second decision point that could disagree with the op's.
TEST(Autocast, LayersLeaveTheQuestionToTheOps) {
  const testing::SourceScan scan =
      testing::scan_sources({"autocast_input", "autocast_input_dtype", "autocast_cast", "autocast_runs_low"}, true, {});
  EXPECT_GT(scan.files, 100);
  for (const std::string& m : scan.matches) {
    if (m.rfind("src/nn/", 0) == 0 || m.rfind("include/mantissa/nn/", 0) == 0) ADD_FAILURE() << m << " (let the op ask autocast)";
  }
}

}  // namespace mantissa
