// The product kernels that do more than the product, and the cross-entropy backward that works in place:
// the accumulating product (out += a . w: the blocked classifier's dw and blocked attention's dk, dv
// added inside the product), the product with a's row sums (a linear layer's weight and bias gradients
// in one pass), the products with GPT-2's GELU inside (its MLP as one op), and the backward that turns a block of logits into its gradient in place. Each fast
// kernel against the reference on fresh random inputs, the reference against its definition, and what
// the blocked classifier keeps and allocates.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "../../src/backend/registry.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/backend/kernel_timer.h"
#include "mantissa/core/memory.h"
#include "mantissa/ops/ops.h"
#include "test_support.h"

namespace mantissa {
namespace {

using detail::run_kernel;
namespace kernel = detail::kernel;

constexpr double kEpsF32 = 0x1p-23;

void accumulate(const Tensor& a, const Tensor& w, const Tensor& out) {
  run_kernel<kernel::MatmulAccumulate>(Device::cpu(), a, w, out);
}

// The reference's definition on small integers, where every sum is exact: out[b] = old + a[b] . w[b],
// with a weight shared by the batch (stride 0).
TEST(MatmulAccumulate, TheReferenceAddsTheProductToTheOldValue) {
  CpuBackendScope reference(CpuBackend::reference);
  const Tensor a = Tensor::from_values({1, 2, 3, 4, 5, 6, -1, 0, 2, 7, -3, 1}, {2, 2, 3}, DType::f32);
  const Tensor w2 = Tensor::from_values({1, 0, -2, 1, 3, 2}, {3, 2}, DType::f32);
  const Tensor w = make_view(w2, {2, 3, 2}, {0, 2, 1}, 0);
  const Tensor out = Tensor::from_values({0.5, 1, -2, 3, 10, 20, 30, 40}, {2, 2, 2}, DType::f32);
  accumulate(a, w, out);
  // a[0] . w = [[1-4+9, 0+2+6], [4-10+18, 0+5+12]] = [[6, 8], [12, 17]]; a[1] . w = [[-1+0+6, 0+0+4],
  // [7+6+3, 0-3+2]] = [[5, 4], [16, -1]].
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{6.5, 9, 10, 20, 15, 24, 46, 39}));
}

// The cpu kernel against the reference: inputs f32, bf16 and f16; out f32 or the inputs' dtype; a
// transposed operand, a weight shared by the batch and an output that is a strided view of a larger
// tensor, whose other elements must stay as they were.
TEST(MatmulAccumulate, TheCpuKernelMatchesTheReference) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  const std::int64_t batch = 3, m = 37, k = 29, n = 45;
  for (const DType in : {DType::f32, DType::bf16, DType::f16}) {
    for (const DType out_dtype : {DType::f32, in}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + std::string(dtype_name(out_dtype)));
      const Tensor a = transpose(Tensor::uniform({batch, k, m}, in, seed, -2, 2), 1, 2);
      const Tensor w2 = Tensor::uniform({k, n}, in, seed + 1, -2, 2);
      const Tensor w = make_view(w2, {batch, k, n}, {0, n, 1}, 0);
      const Tensor old = Tensor::uniform({batch, m, 2 * n}, out_dtype, seed + 2, -20, 20);
      std::vector<double> got, want;
      for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
        CpuBackendScope scope(backend);
        const Tensor big = mul(old, 1.0);  // a fresh copy (contiguous() would hand back old itself)
        accumulate(a, w, slice(big, 2, 0, 2 * n, 2));  // every other column
        (backend == CpuBackend::onednn ? got : want) = big.to_doubles();
      }
      // Each element: the f32 sum's error over k terms, relative to the sum of magnitudes, plus one
      // rounding into out's dtype on each side.
      const std::vector<double> av = a.to_doubles(), wv = w2.to_doubles(), ov = old.to_doubles();
      const double eps_out = dtype_epsilon(out_dtype);
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < 2 * n; ++j) {
            const auto at = static_cast<std::size_t>((b * m + i) * 2 * n + j);
            if (j % 2 == 1) {
              ASSERT_EQ(got[at], ov[at]) << "element outside the view changed";
              continue;
            }
            double magnitude = std::fabs(ov[at]);
            for (std::int64_t p = 0; p < k; ++p) {
              magnitude += std::fabs(av[static_cast<std::size_t>((b * m + i) * k + p)] *
                                     wv[static_cast<std::size_t>(p * n + j / 2)]);
            }
            const double tol = kEpsF32 * static_cast<double>(k + 2) * magnitude + 2 * eps_out * std::fabs(want[at]);
            ASSERT_NEAR(got[at], want[at], tol) << "batch " << b << " row " << i << " column " << j / 2;
          }
        }
      }
    }
  }
}

// The reference's definition on small integers: the product, and sums[m] = sum_k a[m, k].
TEST(MatmulRowSums, TheReferenceGivesTheProductAndTheRowSums) {
  CpuBackendScope reference(CpuBackend::reference);
  const Tensor a = Tensor::from_values({1, 2, 3, -4, 5, 0.5}, {1, 2, 3}, DType::f32);
  const Tensor w = Tensor::from_values({1, 0, 0, 1, 2, -1}, {1, 3, 2}, DType::f32);
  const Tensor out = Tensor::empty({1, 2, 2}, DType::f32), sums = Tensor::empty({2}, DType::f32);
  run_kernel<kernel::MatmulRowSums>(Device::cpu(), a, w, out, sums);
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{7, -1, -3, 4.5}));
  EXPECT_EQ(sums.to_doubles(), (std::vector<double>{6, 1.5}));
}

// The cpu kernel against the reference, a given as the transpose of a row-major matrix (g^T, as the
// linear layer's backward passes it: the CPU sums g's columns itself), in f32, bf16 and f16: a small g,
// and one whose columns are split across threads, with rows that are not a whole number of the sums'
// row blocks and a row stride wider than its columns (g a slice of a wider matrix).
TEST(MatmulRowSums, TheCpuKernelMatchesTheReference) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  struct Size {
    std::int64_t m, k, n, ld;
  };
  for (const Size size : {Size{41, 300, 23, 41}, Size{203, 517, 7, 211}})
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const std::int64_t m = size.m, k = size.k, n = size.n;
    SCOPED_TRACE(std::string(dtype_name(dtype)) + ", m " + std::to_string(m));
    const Tensor g = Tensor::uniform({k, size.ld}, dtype, seed, -2, 2);
    const Tensor a = make_view(g, {1, m, k}, {size.ld * k, 1, size.ld}, 0);
    const Tensor w = Tensor::uniform({1, k, n}, dtype, seed + 1, -2, 2);
    std::vector<double> out[2], sums[2];
    for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
      CpuBackendScope scope(backend);
      const Tensor o = Tensor::empty({1, m, n}, dtype), s = Tensor::empty({m}, dtype);
      run_kernel<kernel::MatmulRowSums>(Device::cpu(), a, w, o, s);
      out[backend == CpuBackend::reference] = o.to_doubles();
      sums[backend == CpuBackend::reference] = s.to_doubles();
    }
    // Each: the f32 sum's error over k terms, relative to the sum of their magnitudes, plus one rounding
    // into the dtype on each side.
    const std::vector<double> av = a.to_doubles(), wv = w.to_doubles();
    const double eps = dtype_epsilon(dtype);
    for (std::int64_t i = 0; i < m; ++i) {
      double row = 0;
      for (std::int64_t p = 0; p < k; ++p) row += std::fabs(av[static_cast<std::size_t>(i * k + p)]);
      const auto r = static_cast<std::size_t>(i);
      ASSERT_NEAR(sums[0][r], sums[1][r], kEpsF32 * static_cast<double>(k) * row + 2 * eps * std::fabs(sums[1][r])) << i;
      for (std::int64_t j = 0; j < n; ++j) {
        double magnitude = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          magnitude += std::fabs(av[static_cast<std::size_t>(i * k + p)] * wv[static_cast<std::size_t>(p * n + j)]);
        }
        const auto at = static_cast<std::size_t>(i * n + j);
        ASSERT_NEAR(out[0][at], out[1][at], kEpsF32 * static_cast<double>(k) * magnitude + 2 * eps * std::fabs(out[1][at]))
            << "row " << i << " column " << j;
      }
    }
  }
}

// GPT-2's MLP's fused products on the CPU are what they say: pre the product (Matmul's bits), out the
// GELU of the product's f32 sum rounded once; backward, the GELU's gradient at pre times the f32 product,
// rounded once. In each compute dtype, a transposed weight, an f32 bias. Bit for bit where the kernel
// makes one product (40 columns); 4100 columns go in blocks of rows (63 rows: 1 MiB of f32 sums, the
// last block short), whose products oneDNN may sum in another order than one product's: there within
// one rounding and the f32 sums' error (k = 32 terms of at most 1 / 2).
TEST(MatmulGelu, TheCpuKernelsAreTheGeluOfTheF32ProductAndItsGradientTimesIt) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  for (const auto& [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{37, 48, 40}, {150, 32, 4100}}) {
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(n) + " columns");
      const auto expect_same = [&, n = n, k = k](const Tensor& got, const Tensor& want, const char* what) {
        if (n == 40) {
          EXPECT_EQ(got.to_doubles(), want.to_doubles()) << what;
          return;
        }
        const std::vector<double> gv = got.to_doubles(), wv = want.to_doubles();
        for (std::size_t i = 0; i < gv.size(); ++i) {
          const double tol = 2 * dtype_epsilon(dtype) * std::fabs(wv[i]) + 2 * kEpsF32 * static_cast<double>(k) * 0.5;
          ASSERT_NEAR(gv[i], wv[i], tol) << what << " " << i;
        }
      };
      const Tensor a = Tensor::uniform({1, m, k}, dtype, seed, -1, 1);
      const Tensor w = transpose(Tensor::uniform({1, n, k}, dtype, seed + 1, -0.5, 0.5), 1, 2);
      const Tensor bias = Tensor::uniform({n}, DType::f32, seed + 2, -1, 1);
      const Tensor pre = Tensor::empty({1, m, n}, dtype), out = Tensor::empty({1, m, n}, dtype);
      run_kernel<kernel::MatmulGelu>(Device::cpu(), a, w, bias, pre, out);
      const Tensor sum = Tensor::empty({1, m, n}, DType::f32), rounded = Tensor::empty({1, m, n}, dtype),
                   gelu = Tensor::empty({1, m, n}, dtype);
      run_kernel<kernel::Matmul>(Device::cpu(), a, w, bias, sum);
      run_kernel<kernel::Matmul>(Device::cpu(), a, w, bias, rounded);
      run_kernel<kernel::Unary>(Device::cpu(), UnaryOp::gelu_tanh, 0.0, sum, gelu);
      expect_same(pre, rounded, "pre");
      expect_same(out, gelu, "out");

      const Tensor g = Tensor::uniform({1, m, k}, dtype, seed + 3, -1, 1), grad = Tensor::empty({1, m, n}, dtype);
      run_kernel<kernel::MatmulGeluBackward>(Device::cpu(), g, w, pre, grad);
      const Tensor product = Tensor::empty({1, m, n}, DType::f32), expected = Tensor::empty({1, m, n}, dtype);
      run_kernel<kernel::Matmul>(Device::cpu(), g, w, Tensor(), product);
      run_kernel<kernel::UnaryBackward>(Device::cpu(), UnaryOp::gelu_tanh, 0.0, pre, product, expected);
      expect_same(grad, expected, "gradient");
    }
  }
}

// gelu_mlp is fc, the tanh GELU and proj: in f64 on the reference (where the GELU of the sum before its
// rounding is the GELU of the rounded sum) the output and every gradient as the three ops give them.
TEST(GeluMlp, IsFcThenTheTanhGeluThenProj) {
  MANTISSA_TRACE_SEED();
  CpuBackendScope reference(CpuBackend::reference);
  const std::uint64_t seed = testing::test_seed();
  const auto inputs = [&] {
    std::vector<Tensor> in = {Tensor::uniform({2, 3, 8}, DType::f64, seed, -2, 2), Tensor::uniform({12, 8}, DType::f64, seed + 1, -1, 1),
                              Tensor::uniform({12}, DType::f64, seed + 2, -1, 1), Tensor::uniform({5, 12}, DType::f64, seed + 3, -1, 1),
                              Tensor::uniform({5}, DType::f64, seed + 4, -1, 1)};
    for (Tensor& t : in) t.set_requires_grad(true);
    return in;
  };
  const std::vector<Tensor> one = inputs(), three = inputs();
  const Tensor y1 = gelu_mlp(one[0], one[1], one[2], one[3], one[4]);
  const Tensor y3 = linear(gelu_tanh(linear(three[0], three[1], three[2])), three[3], three[4]);
  ASSERT_EQ(y1.shape(), y3.shape());
  const Tensor r = Tensor::uniform(y1.shape(), DType::f64, seed + 5, -1, 1);
  sum(mul(y1, r)).backward();
  sum(mul(y3, r)).backward();
  const auto expect_near = [](const std::vector<double>& got, const std::vector<double>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << what << " " << i;
  };
  expect_near(y1.to_doubles(), y3.to_doubles(), "output");
  const char* names[] = {"x", "fc weight", "fc bias", "proj weight", "proj bias"};
  for (std::size_t k = 0; k < one.size(); ++k) expect_near(one[k].grad().to_doubles(), three[k].grad().to_doubles(), names[k]);
}

// Passing the logits as the gradient overwrites them with the gradient: the same values as a separate
// output, on the cpu kernel and the reference, with label smoothing and an ignored row; the losses it
// writes from the same read are CrossEntropy's, bit for bit.
TEST(CrossEntropyBackward, WritesTheGradientOverTheLogitsInPlaceAndTheLossesFromTheSameRead) {
  MANTISSA_TRACE_SEED();
  const std::int64_t n = 9, c = 300;
  std::vector<std::int64_t> targets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) targets[static_cast<std::size_t>(i)] = i == 4 ? -100 : (i * 37) % c;
  for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (backend == CpuBackend::reference ? " reference" : " cpu"));
      CpuBackendScope scope(backend);
      const Tensor logits = Tensor::randn({n, c}, dtype, testing::test_seed(), 0.0, 3.0);
      const Tensor g = Tensor::uniform({n}, DType::f32, testing::test_seed() + 1, -1, 1);
      const Tensor separate = Tensor::empty({n, c}, dtype);
      run_kernel<kernel::CrossEntropyBackward>(Device::cpu(), logits, targets, -100, 0.1, g, separate, Tensor());
      const Tensor in_place = contiguous_copy(logits);
      const Tensor losses = Tensor::full({n}, 7.0, DType::f32), expected = Tensor::empty({n}, DType::f32);
      run_kernel<kernel::CrossEntropyBackward>(Device::cpu(), in_place, targets, -100, 0.1, g, in_place, losses);
      run_kernel<kernel::CrossEntropy>(Device::cpu(), logits, targets, -100, 0.1, expected);
      EXPECT_EQ(in_place.to_doubles(), separate.to_doubles());
      EXPECT_EQ(losses.to_doubles(), expected.to_doubles());
      EXPECT_EQ(losses.to_doubles()[4], 0.0) << "the ignored row";
      // The ignored row's gradient is zero; every other row's sums to zero (sum_c p_c = sum_c w_c = 1).
      const std::vector<double> v = separate.to_doubles();
      for (std::int64_t r = 0; r < n; ++r) {
        double total = 0, largest = 0;
        for (std::int64_t j = 0; j < c; ++j) {
          total += v[static_cast<std::size_t>(r * c + j)];
          largest = std::max(largest, std::fabs(v[static_cast<std::size_t>(r * c + j)]));
        }
        if (r == 4) {
          EXPECT_EQ(largest, 0.0);
        } else {
          EXPECT_NEAR(total, 0.0, static_cast<double>(c) * dtype_epsilon(dtype) * largest) << "row " << r;
        }
      }
    }
  }
}

// The blocked classifier's backward allocates per block only the block's logits (which become their
// gradient): no f32 probabilities, no separate gradient, no per-block term of dw. Blocks of 64 rows
// of 2048 classes are 512 KiB in f32; the backward's peak over what was live before it stays under
// dx, dw and their f32 sum plus two blocks.
TEST(LinearCrossEntropy, BlockedBackwardAllocatesOneBlockOfLogits) {
  const std::int64_t n = 512, c = 32, v = 2048, block = 64;
  std::vector<std::int64_t> targets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) targets[static_cast<std::size_t>(i)] = (i * 13) % v;
  const Tensor x = Tensor::randn({n, c}, DType::f32, 5).set_requires_grad();
  const Tensor w = Tensor::randn({v, c}, DType::f32, 6).set_requires_grad();
  const Tensor loss = linear_cross_entropy(x, w, targets, Reduction::mean, -100, 0.0, block);
  reset_peak_memory();
  const std::int64_t before = memory_stats().current_total;
  loss.backward();
  const std::int64_t grads = (n * c + 2 * v * c) * 4;  // dx, dw and dw's f32 sum
  const std::int64_t one_block = block * v * 4;
  EXPECT_LE(memory_stats().peak_total - before, grads + 2 * one_block);
  EXPECT_GT(memory_stats().peak_total - before, grads);  // the bound is not loose enough to pass anything
}

// The kept gradient (llm.c's fused classifier): the forward pass leaves softmax minus target [N, V] in
// the logits' dtype, and backward is the linear layer's two products, where the recomputed way makes a
// third (the logits again); backward allocates nothing of [N, V].
TEST(LinearCrossEntropy, AKeptGradientMakesBackwardTwoProductsAndNoLogits) {
  const std::int64_t n = 512, c = 32, v = 2048;
  std::vector<std::int64_t> targets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) targets[static_cast<std::size_t>(i)] = (i * 13) % v;
  const double product = 2.0 * static_cast<double>(n * c * v);
  for (const ClassifierGradient gradient : {ClassifierGradient::kept, ClassifierGradient::recomputed}) {
    const bool kept = gradient == ClassifierGradient::kept;
    SCOPED_TRACE(kept ? "kept" : "recomputed");
    const Tensor x = Tensor::randn({n, c}, DType::f32, 5).set_requires_grad();
    const Tensor w = Tensor::randn({v, c}, DType::f32, 6).set_requires_grad();
    const std::int64_t before_forward = memory_stats().current_of(MemoryCategory::activations);
    const Tensor loss = linear_cross_entropy(x, w, targets, Reduction::mean, -100, 0.0, 64, gradient);
    const std::int64_t kept_bytes = memory_stats().current_of(MemoryCategory::activations) - before_forward;
    EXPECT_EQ(kept_bytes >= n * v * 4, kept) << kept_bytes;
    reset_kernel_times();
    reset_peak_memory();
    const std::int64_t before = memory_stats().current_total;
    loss.backward();
    EXPECT_EQ(kernel_times().matmul_flops, (kept ? 2 : 3) * product);
    if (kept) {
      const std::int64_t grads = (n * c + v * c) * 4 * 2;  // dx, dw and their f32 products
      EXPECT_LE(memory_stats().peak_total - before, grads + 65536) << "one [N, V] is " << n * v * 4;
    }
  }
}

}  // namespace
}  // namespace mantissa
