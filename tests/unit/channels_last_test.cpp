// Channels-last activations (src/core/channels_last.h): on the CPU's oneDNN backend, in a dtype oneDNN
// convolves, a convolution's output is channels-last and batch norm, the elementwise ops, max pooling and
// the gradients keep it (so the convolutions read and write activations with no reorder); elsewhere
// everything stays NCHW. Either way the values and gradients are the reference backend's, within the
// dtype's tolerance, and max pooling's are exactly the reference's, NaN and ties included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../src/core/channels_last.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"
#include "test_support.h"

namespace mantissa {
namespace {

struct ChainResult {
  std::vector<Tensor> layouts;  // the activations, in order: conv, batch norm, relu, add, pool
  std::vector<std::vector<double>> values;  // the pooled output, then the gradients of x, w, gamma, beta
};

// conv -> batch norm -> relu -> add (residual) -> relu -> 2x2 max pooling, and its backward; the CNN's
// stage in small (odd width, 16 channels).
ChainResult chain(CpuBackend backend, DType dtype, std::uint64_t seed) {
  CpuBackendScope scope(backend);
  const Tensor x = cast(Tensor::uniform({3, 4, 10, 9}, DType::f32, seed, -1, 1), dtype).set_requires_grad();
  const Tensor w = cast(Tensor::uniform({16, 4, 3, 3}, DType::f32, seed + 1, -0.5, 0.5), dtype).set_requires_grad();
  const Tensor gamma = Tensor::uniform({16}, DType::f32, seed + 2, 0.5, 1.5).set_requires_grad();
  const Tensor beta = Tensor::uniform({16}, DType::f32, seed + 3, -0.5, 0.5).set_requires_grad();
  const Tensor running_mean = Tensor::zeros({16}, DType::f32), running_var = Tensor::full({16}, 1, DType::f32);
  const Tensor c = conv2d(x, w, Tensor(), {1, 1, 1, 1, 1, 1, 1});
  const Tensor b = batch_norm(c, gamma, beta, running_mean, running_var, true);
  const Tensor r = relu(b);
  const Tensor s = relu(add(r, c));
  const Tensor p = max_pool2d(s, 2, 2);
  p.backward(cast(Tensor::uniform(p.shape(), DType::f32, seed + 4, -1, 1), dtype));
  return {{c, b, r, s, p}, {p.to_doubles(), x.grad().to_doubles(), w.grad().to_doubles(), gamma.grad().to_doubles(), beta.grad().to_doubles()}};
}

TEST(ChannelsLast, TheConvolutionChainKeepsItWhereOnednnConvolvesTheDtype) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const ChainResult want = chain(CpuBackend::reference, dtype, seed);
    const ChainResult got = chain(CpuBackend::onednn, dtype, seed);
    const bool expected = onednn_supports(OnednnPrimitive::convolution, dtype);
    for (std::size_t i = 0; i < got.layouts.size(); ++i) {
      EXPECT_EQ(detail::is_channels_last(got.layouts[i]) && !got.layouts[i].is_contiguous(), expected) << "activation " << i;
      EXPECT_TRUE(want.layouts[i].is_contiguous()) << "activation " << i << " on the reference backend";
    }
    // f32: sums of a few hundred terms, in another order; bf16: each result rounded to bf16 (8 bits) at
    // every op, in another order.
    const double tolerance = dtype == DType::f32 ? 1e-4 : 6e-2;
    const char* names[] = {"output", "dx", "dw", "dgamma", "dbeta"};
    for (std::size_t k = 0; k < want.values.size(); ++k) {
      double scale = 0, worst = 0;
      for (std::size_t i = 0; i < want.values[k].size(); ++i) {
        scale = std::max(scale, std::abs(want.values[k][i]));
        worst = std::max(worst, std::abs(got.values[k][i] - want.values[k][i]));
      }
      EXPECT_LE(worst, tolerance * std::max(scale, 1.0)) << names[k];
    }
  }
}

// Max pooling of channels-last data on values from {0, 1, NaN}: every arrangement of ties and NaN in a
// window; odd heights and widths (a row and a column in no window). Output and gradients exactly the
// reference's (on the same values laid out NCHW).
TEST(ChannelsLast, MaxPoolingTiesAndNaNAsTheReference) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Shape& nhwc : {Shape{2, 6, 38, 16}, Shape{3, 7, 9, 32}}) {
    std::vector<double> v(static_cast<std::size_t>(nhwc[0] * nhwc[1] * nhwc[2] * nhwc[3]));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::size_t r = (i * 2654435761U) % 97;
      v[i] = r < 8 ? nan : (r < 52 ? 1.0 : 0.0);
    }
    for (const DType d : {DType::f32, DType::bf16}) {
      if (!onednn_supports(OnednnPrimitive::convolution, d)) continue;  // no channels-last data then
      SCOPED_TRACE(shape_str(nhwc) + " " + std::string(dtype_name(d)));
      std::vector<std::vector<double>> outs, grads;
      for (const CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
        CpuBackendScope scope(backend);
        const Tensor base = Tensor::from_values(v, nhwc, d);
        // The same values: channels-last on oneDNN's backend, NCHW on the reference's.
        const Tensor x = (backend == CpuBackend::onednn ? permute(base, {0, 3, 1, 2}) : contiguous(permute(base, {0, 3, 1, 2}))).detach().set_requires_grad();
        const Tensor y = max_pool2d(x, 2, 2);
        if (backend == CpuBackend::onednn) {
          EXPECT_TRUE(detail::is_channels_last(y));
        }
        std::vector<double> g(static_cast<std::size_t>(y.numel()));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = 1 + static_cast<double>(i % 7);
        y.backward(Tensor::from_values(g, y.shape(), d));
        outs.push_back(y.to_doubles());
        grads.push_back(x.grad().to_doubles());
      }
      ASSERT_EQ(outs[0].size(), outs[1].size());
      for (std::size_t i = 0; i < outs[0].size(); ++i) {
        EXPECT_TRUE(std::isnan(outs[0][i]) ? std::isnan(outs[1][i]) : outs[0][i] == outs[1][i]) << "output " << i;
      }
      EXPECT_EQ(grads[0], grads[1]);
    }
  }
}

}  // namespace
}  // namespace mantissa
