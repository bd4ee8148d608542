// Semantics of the layer ops that the gradient and parity tables cannot show: dropout's statistics and
// reproducibility, embedding's bounds, attention's causality, layer norm's output moments, and that
// layout-changing copies move bits, max pooling's ties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "mantissa/backend/backend_select.h"
#include "mantissa/core/memory.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

// A copy that changes the layout moves bits: every 16-bit pattern (NaN payloads, signalling ones,
// subnormals) comes through a transpose unchanged, and f32 NaN payloads too.
TEST(Copy, LayoutChangesKeepEveryBitPattern) {
  for (const DType d : {DType::bf16, DType::f16, DType::f32}) {
    const Tensor a = Tensor::empty({256, 256}, d);
    for (std::uint32_t i = 0; i < 256 * 256; ++i) {
      if (d == DType::f32) {
        static_cast<std::uint32_t*>(a.data())[i] = 0x7f800001U + i * 977U;  // NaNs with many payloads, then more
      } else {
        static_cast<std::uint16_t*>(a.data())[i] = static_cast<std::uint16_t>(i);
      }
    }
    for (const Tensor& t : {contiguous(transpose(a, 0, 1)), contiguous(permute(reshape(a, {16, 16, 256}), {2, 0, 1}))}) {
      const Tensor back = t.dim() == 2 ? contiguous(transpose(t, 0, 1)) : contiguous(permute(t, {1, 2, 0}));
      EXPECT_EQ(std::memcmp(back.data(), a.data(), 256 * 256 * dtype_size(d)), 0) << dtype_name(d);
    }
  }
}

// Max pooling's gradient goes to the first maximum of each window in reading order, on ties too (the
// random inputs of the parity tables rarely tie).
TEST(MaxPool2d, TiesSendTheGradientToTheFirstMaximum) {
  for (const DType d : {DType::f32, DType::bf16}) {
    // Two 2x2 windows side by side: all equal, then the maximum twice (second and third place).
    Tensor x = Tensor::from_values({1, 1, 0, 2, 1, 1, 2, 1}, {1, 1, 2, 4}, d).set_requires_grad();
    max_pool2d(x, 2, 2).backward(Tensor::from_values({5, 7}, {1, 1, 1, 2}, d));
    EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{5, 0, 0, 7, 0, 0, 0, 0})) << dtype_name(d);
  }
}

TEST(Dropout, DropsAboutPAndScalesTheRestAndRepeatsWithTheSeed) {
  const Tensor x = Tensor::full({100000}, 2.0, DType::f32);
  const std::vector<double> a = dropout(x, 0.25, 7).to_doubles();
  std::int64_t zeros = 0;
  for (double v : a) {
    if (v == 0) {
      ++zeros;
    } else {
      ASSERT_NEAR(v, 2.0 / 0.75, 1e-6);
    }
  }
  // Binomial(1e5, 0.25): six standard deviations is about 822.
  EXPECT_NEAR(static_cast<double>(zeros), 25000, 822);
  EXPECT_EQ(dropout(x, 0.25, 7).to_doubles(), a);
  EXPECT_NE(dropout(x, 0.25, 8).to_doubles(), a);
  EXPECT_EQ(dropout(x, 0.25, 7, /*training=*/false).to_doubles(), x.to_doubles());
  EXPECT_THROW(dropout(x, 1.5, 7), std::invalid_argument);
}

TEST(Embedding, PicksRowsAndRejectsIdsOutOfRange) {
  const Tensor w = Tensor::from_values({0, 1, 10, 11, 20, 21}, {3, 2}, DType::f32);
  const std::int64_t ids[] = {2, 0};
  EXPECT_EQ(embedding(w, ids, {2}).to_doubles(), (std::vector<double>{20, 21, 0, 1}));
  const std::int64_t bad[] = {1, 3};
  try {
    embedding(w, bad, {2});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "embedding: id 3 at position 1 is not in [0, 3)");
  }
}

TEST(Attention, CausalPositionsIgnoreLaterKeys) {
  // Changing the last key and value must not change any output but the last position's.
  const Tensor q = Tensor::randn({1, 4, 8}, DType::f32, 1);
  const Tensor k = Tensor::randn({1, 4, 8}, DType::f32, 2);
  const Tensor v = Tensor::randn({1, 4, 8}, DType::f32, 3);
  const Tensor k2 = concat(std::vector<Tensor>{slice(k, 1, 0, 3), Tensor::randn({1, 1, 8}, DType::f32, 4)}, 1);
  const Tensor v2 = concat(std::vector<Tensor>{slice(v, 1, 0, 3), Tensor::randn({1, 1, 8}, DType::f32, 5)}, 1);
  const std::vector<double> a = scaled_dot_product_attention(q, k, v).to_doubles();
  const std::vector<double> b = scaled_dot_product_attention(q, k2, v2).to_doubles();
  for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(a[i], b[i]) << i;
  bool last_differs = false;
  for (std::size_t i = 24; i < 32; ++i) last_differs = last_differs || a[i] != b[i];
  EXPECT_TRUE(last_differs);
}

// self_attention on a fused projection is scaled_dot_product_attention on the heads split out of it,
// forward and backward, in f64 (so the two agree to rounding), causal or not, short and long, whole or
// in blocks of query rows (one row, 16 rows, and 50 rows: 130 = 50 + 50 + 30).
TEST(Attention, SelfAttentionOnAFusedProjectionMatchesTheSplitHeads) {
  for (const std::int64_t t : {7, 130}) {
    for (const std::int64_t block : {0, 1, 16, 50}) {
      for (const bool causal : {true, false}) {
        SCOPED_TRACE("t " + std::to_string(t) + " query block " + std::to_string(block) + (causal ? " causal" : ""));
        const std::int64_t b = 2, h = 3, d = 4, c = h * d;
        const Tensor qkv = Tensor::randn({b, t, 3 * c}, DType::f64, 11).set_requires_grad();
        const Tensor weights = Tensor::randn({b, t, c}, DType::f64, 12);
        const Tensor fused = self_attention(qkv, h, causal, block);
        sum(mul(fused, weights)).backward();
        const std::vector<double> fused_grad = qkv.grad().to_doubles();

        const Tensor qkv2 = qkv.detach().set_requires_grad();
        const Tensor heads = permute(reshape(qkv2, {b, t, 3, h, d}), {2, 0, 3, 1, 4});  // [3, b, h, t, d]
        const auto part = [&](std::int64_t i) { return reshape(slice(heads, 0, i, i + 1), {b, h, t, d}); };
        const Tensor split =
            reshape(permute(scaled_dot_product_attention(part(0), part(1), part(2), causal), {0, 2, 1, 3}), {b, t, c});
        sum(mul(split, weights)).backward();

        const std::vector<double> x = fused.to_doubles(), y = split.to_doubles();
        for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-12) << i;
        const std::vector<double> gx = fused_grad, gy = qkv2.grad().to_doubles();
        for (std::size_t i = 0; i < gx.size(); ++i) ASSERT_NEAR(gx[i], gy[i], 1e-12) << i;
      }
    }
  }
  EXPECT_THROW(self_attention(Tensor::randn({1, 4, 9}, DType::f32, 1), 2), std::invalid_argument);
  EXPECT_THROW(self_attention(Tensor::randn({1, 4, 12}, DType::f32, 1), 2, true, -1), std::invalid_argument);
}

// In blocks of query rows nothing of [B * H, T, T] is kept for backward or made at once: with 8 heads
// of 256 positions in f32, whole attention keeps 2 MiB of probabilities (and makes as much of scores);
// blocks of 32 rows hold an eighth of that at a time.
TEST(Attention, BlocksOfQueryRowsKeepNoSquareOfProbabilities) {
  const std::int64_t b = 2, t = 256, h = 4, c = 4 * 8;
  const std::int64_t square = b * h * t * t * 4;
  const auto peak = [&](std::int64_t block, std::int64_t& kept) {
    const Tensor qkv = Tensor::randn({b, t, 3 * c}, DType::f32, 5).set_requires_grad();
    reset_peak_memory();
    const std::int64_t before = memory_stats().current_of(MemoryCategory::activations);
    Tensor out = self_attention(qkv, h, true, block);
    kept = memory_stats().current_of(MemoryCategory::activations) - before;
    sum(out).backward();
    return memory_stats().peak_total;
  };
  std::int64_t kept_whole = 0, kept_blocked = 0;
  const std::int64_t whole = peak(0, kept_whole), blocked = peak(32, kept_blocked);
  EXPECT_GE(kept_whole - kept_blocked, square);
  EXPECT_LT(blocked, whole - square);
}

// linear_cross_entropy is cross_entropy(matmul(x, w^T)), value and gradients, in f64 (so the two agree to
// rounding), whole or in blocks of rows (one row, 7 rows, 50 rows: 130 = 50 + 50 + 30) or with the
// gradient kept from the forward pass, mean or sum, with label smoothing and ignored rows.
TEST(LinearCrossEntropy, MatchesTheClassifierProductThenCrossEntropy) {
  const std::int64_t n = 130, c = 12, v = 37;
  std::vector<std::int64_t> targets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) targets[static_cast<std::size_t>(i)] = i % 11 == 3 ? -100 : (i * 7) % v;
  for (const auto& [block, gradient] : {std::pair{0, ClassifierGradient::automatic}, std::pair{1, ClassifierGradient::recomputed},
                                        std::pair{7, ClassifierGradient::recomputed}, std::pair{50, ClassifierGradient::recomputed},
                                        std::pair{0, ClassifierGradient::kept}, std::pair{7, ClassifierGradient::kept}}) {
    for (const Reduction reduction : {Reduction::mean, Reduction::sum}) {
      SCOPED_TRACE("block " + std::to_string(block) + (reduction == Reduction::sum ? " sum" : " mean") +
                   (gradient == ClassifierGradient::kept ? " kept" : ""));
      const Tensor x = Tensor::randn({n, c}, DType::f64, 21).set_requires_grad();
      const Tensor w = Tensor::randn({v, c}, DType::f64, 22).set_requires_grad();
      const Tensor fused = linear_cross_entropy(x, w, targets, reduction, -100, 0.05, block, gradient);
      fused.backward();
      const Tensor x2 = x.detach().set_requires_grad(), w2 = w.detach().set_requires_grad();
      const Tensor split = cross_entropy(matmul(x2, transpose(w2, 0, 1)), targets, reduction, -100, 0.05);
      split.backward();
      EXPECT_NEAR(fused.item(), split.item(), 1e-12 * std::fabs(split.item()));
      for (const auto& [a, b] : {std::pair{x.grad(), x2.grad()}, std::pair{w.grad(), w2.grad()}}) {
        const std::vector<double> ga = a.to_doubles(), gb = b.to_doubles();
        for (std::size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(ga[i], gb[i], 1e-12) << i;
      }
    }
  }
  // No rows: a sum of nothing, and a zero gradient for w, either way.
  for (const ClassifierGradient gradient : {ClassifierGradient::kept, ClassifierGradient::recomputed}) {
    const Tensor x = Tensor::randn({0, 4}, DType::f32, 1).set_requires_grad();
    const Tensor w = Tensor::randn({5, 4}, DType::f32, 2).set_requires_grad();
    const Tensor none = linear_cross_entropy(x, w, std::vector<std::int64_t>{}, Reduction::sum, -100, 0.0, 2, gradient);
    none.backward();
    EXPECT_EQ(none.item(), 0.0);
    EXPECT_EQ(w.grad().to_doubles(), std::vector<double>(20, 0.0));
  }
  EXPECT_THROW(linear_cross_entropy(Tensor::randn({3, 4}, DType::f32, 1), Tensor::randn({5, 3}, DType::f32, 1),
                                    std::vector<std::int64_t>{0, 1, 2}),
               std::invalid_argument);
  EXPECT_THROW(linear_cross_entropy(Tensor::randn({3, 4}, DType::f32, 1), Tensor::randn({5, 4}, DType::f32, 1),
                                    std::vector<std::int64_t>{0, 1, 5}, Reduction::mean, -100, 0.0, 2),
               std::invalid_argument);
}

// In blocks nothing of [N, V] is kept for backward: whole, the f32 probabilities are (1 MiB here).
TEST(LinearCrossEntropy, BlocksKeepNoLogitsOrProbabilities) {
  const std::int64_t n = 512, c = 16, v = 512;
  const std::vector<std::int64_t> targets(static_cast<std::size_t>(n), 3);
  const auto kept = [&](std::int64_t block) {
    const Tensor x = Tensor::randn({n, c}, DType::f32, 5).set_requires_grad();
    const Tensor w = Tensor::randn({v, c}, DType::f32, 6).set_requires_grad();
    const std::int64_t before = memory_stats().current_of(MemoryCategory::activations);
    const Tensor loss = linear_cross_entropy(x, w, targets, Reduction::mean, -100, 0.0, block);
    return memory_stats().current_of(MemoryCategory::activations) - before;
  };
  EXPECT_GE(kept(0) - kept(64), n * v * 4);
}

TEST(LayerNorm, RowsComeOutWithMeanZeroAndUnitVarianceInBf16) {
  const Tensor x = Tensor::randn({3, 64}, DType::bf16, 9, 5.0, 3.0);
  const Tensor y = layer_norm(x, Tensor::full({64}, 1, DType::f32), Tensor::zeros({64}, DType::f32));
  EXPECT_EQ(y.dtype(), DType::bf16);
  const Tensor yf = cast(y, DType::f32);
  for (double m : mean(yf, {1}).to_doubles()) EXPECT_NEAR(m, 0, 0.01);
  for (double v : variance(yf, {1}).to_doubles()) EXPECT_NEAR(v, 1, 0.02);
}

// A layer norm whose output is made for a product (a GPT block's, under autocast) gives the bits of the
// f32 layer norm cast to that dtype, and, for a gradient in that dtype, the same gradients of x, gamma
// and beta: the fusion saves passes and changes no number. Both CPU backends, bf16 and f16, 768 columns
// (GPT-2's) and 100 (not a multiple of 8), data far from zero.
TEST(LayerNorm, AnOutputMadeForAProductIsTheCastOfTheF32OutputBitForBit) {
  for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
    const CpuBackendScope scope(backend);
    for (const DType out : {DType::bf16, DType::f16}) {
      for (const std::int64_t cols : {768, 100}) {
        SCOPED_TRACE(std::string(dtype_name(out)) + ", " + std::to_string(cols) + " columns" +
                     (backend == CpuBackend::reference ? ", reference" : ", cpu"));
        const Tensor x = Tensor::randn({37, cols}, DType::f32, 21, 3.0, 2.0).set_requires_grad();
        const Tensor gamma = Tensor::randn({cols}, DType::f32, 22, 1.0, 0.3).set_requires_grad();
        const Tensor beta = Tensor::randn({cols}, DType::f32, 23, 0.0, 0.3).set_requires_grad();
        const Tensor g = Tensor::randn({37, cols}, out, 24);
        const auto run = [&](bool fused) {
          const Tensor y = fused ? layer_norm(x, gamma, beta, 1e-5, out) : cast(layer_norm(x, gamma, beta, 1e-5), out);
          EXPECT_EQ(y.dtype(), out);
          for (const Tensor* t : {&x, &gamma, &beta}) t->zero_grad();
          y.backward(g);
          return std::vector<Tensor>{y, x.grad(), gamma.grad(), beta.grad()};
        };
        const std::vector<Tensor> fused = run(true), composed = run(false);
        for (std::size_t i = 0; i < fused.size(); ++i) {
          ASSERT_EQ(fused[i].dtype(), composed[i].dtype()) << i;
          EXPECT_EQ(std::memcmp(fused[i].data(), composed[i].data(), static_cast<std::size_t>(fused[i].numel()) * dtype_size(fused[i].dtype())), 0)
              << "output, x, gamma, beta: " << i;
        }
      }
    }
  }
  EXPECT_THROW(layer_norm(Tensor::zeros({2, 4}, DType::f32), Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f32), 1e-5,
                          DType::e4m3),
               std::invalid_argument);
}

TEST(BatchNorm, UpdatesRunningStatisticsAsPyTorch) {
  // One channel, values 1, 2, 3, 4: batch mean 2.5, unbiased variance 5/3.
  const Tensor x = Tensor::from_values({1, 2, 3, 4}, {4, 1}, DType::f32);
  Tensor rm = Tensor::zeros({1}, DType::f32);
  Tensor rv = Tensor::full({1}, 1.0, DType::f32);
  batch_norm(x, Tensor::full({1}, 1, DType::f32), Tensor::zeros({1}, DType::f32), rm, rv, true, 0.1);
  EXPECT_NEAR(rm.item(), 0.25, 1e-6);
  EXPECT_NEAR(rv.item(), 0.9 + 0.1 * 5.0 / 3.0, 1e-5);
  // Evaluation uses them: (x - 0.25) / sqrt(rv + eps).
  const Tensor y = batch_norm(x, Tensor::full({1}, 1, DType::f32), Tensor::zeros({1}, DType::f32), rm, rv, false);
  EXPECT_NEAR(y.to_doubles()[0], (1 - 0.25) / std::sqrt(rv.item() + 1e-5), 1e-5);
}

TEST(Conv2d, OutputShapeAndChannelErrors) {
  const Tensor x = Tensor::zeros({2, 4, 9, 9}, DType::f32);
  EXPECT_EQ(conv2d(x, Tensor::zeros({8, 2, 3, 3}, DType::f32), {}, {2, 2, 1, 1, 1, 1, 2}).shape(), (Shape{2, 8, 5, 5}));
  EXPECT_THROW(conv2d(x, Tensor::zeros({8, 3, 3, 3}, DType::f32)), std::invalid_argument);
  EXPECT_THROW(conv2d(x, Tensor::zeros({8, 4, 11, 11}, DType::f32)), std::invalid_argument);
}

}  // namespace
}  // namespace mantissa
