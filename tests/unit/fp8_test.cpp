// FP8 products: the CPU quantizer against the rounding rule's definition (every bf16 input, both formats)
// and bit for bit against the reference kernel; the scaled product against the reference with a bound
// from f32 accumulation; fp8_linear's forward and backward against an oracle written from the recipe
// (quantize by the format rules, multiply exactly in double, descale); the delayed recipe's history; the
// layer policy; and the case block scaling exists for (outliers).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../../src/backend/registry.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/nn/fp8_policy.h"
#include "mantissa/nn/models.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/precision_plan.h"
#include "test_support.h"

namespace mantissa {
namespace {

using detail::Fp8QuantizeStats;

float bf16_value(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t{bits} << 16); }

// Every bf16 bit pattern as a [256, 256] bf16 tensor.
Tensor every_bf16() {
  Tensor t = Tensor::empty({256, 256}, DType::bf16);
  auto* p = t.data_as<std::uint16_t>();
  for (std::uint32_t i = 0; i < 65536; ++i) p[i] = static_cast<std::uint16_t>(i);
  return t;
}

Fp8QuantizeStats quantize(const Tensor& x, Format f, const Tensor& scales, std::int64_t br, std::int64_t bc, bool deq,
                          const Tensor& out) {
  return detail::run_kernel<detail::kernel::Fp8Quantize>(Device::cpu(), x, f, scales, br, bc, deq, out);
}

// The format's finite non-negative values, ascending, with their codes: the grid the definition rounds to.
std::vector<std::pair<double, std::uint32_t>> grid(Format f) {
  std::vector<std::pair<double, std::uint32_t>> g;
  for (std::uint32_t code = 0; code < f.sign_bit(); ++code) {
    const float v = decode(f, code);
    if (std::isfinite(v)) g.emplace_back(v, code);
  }
  std::sort(g.begin(), g.end());
  return g;
}

// The definition: the nearest grid value (a tie goes to the even code), past the largest the largest.
double round_by_definition(double v, const std::vector<std::pair<double, std::uint32_t>>& g) {
  const double a = std::fabs(v);
  if (a >= g.back().first) return std::copysign(g.back().first, v);
  const auto hi = std::lower_bound(g.begin(), g.end(), std::make_pair(a, std::uint32_t{0}));
  if (hi->first == a) return std::copysign(a, v);
  const auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  const double r = dl < dh ? lo->first : dh < dl ? hi->first : (lo->second % 2 == 0 ? lo->first : hi->first);
  return std::copysign(r, v);
}

TEST(Fp8Quantize, EveryBf16InputRoundsAsTheDefinitionSays) {
  const Tensor x = every_bf16();
  for (Format f : {Format::e4m3(), Format::e5m2()}) {
    const auto g = grid(f);
    for (float s : {1.0f, 0.37f, 1024.0f}) {
      Tensor q = Tensor::empty({256, 256}, DType::bf16);
      quantize(x, f, Tensor::full({1, 1}, s, DType::f32), 256, 256, false, q);
      const auto* in = x.data_as<const std::uint16_t>();
      const auto* out = q.data_as<const std::uint16_t>();
      for (std::size_t i = 0; i < 65536; ++i) {
        const float v = bf16_value(in[i]) * s;
        const float got = bf16_value(out[i]);
        if (std::isnan(v)) {
          ASSERT_TRUE(std::isnan(got)) << f.name() << " input bits " << i;
        } else if (std::isinf(v) && std::isinf(bf16_value(in[i]))) {
          ASSERT_EQ(got, v) << f.name() << ": infinities pass through";
        } else {
          ASSERT_EQ(got, round_by_definition(v, g)) << f.name() << " scale " << s << " input " << bf16_value(in[i]);
          ASSERT_EQ(std::signbit(got), std::signbit(v)) << f.name() << " input bits " << i;
        }
      }
    }
  }
}

// Random f32 values over many magnitudes, a few specials, in a strided (transposed) view.
Tensor random_f32(std::int64_t rows, std::int64_t cols, std::uint64_t seed, bool specials) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(-30, 12), u(-1, 1);
  Tensor t = Tensor::empty({cols, rows}, DType::f32);
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(u(rng) * std::exp2(e(rng)));
  if (specials) {
    p[3] = std::numeric_limits<float>::infinity();
    p[7] = -std::numeric_limits<float>::infinity();
    p[11] = std::numeric_limits<float>::quiet_NaN();
    p[19] = std::bit_cast<float>(0xffa12345U);  // a negative signalling NaN with a payload
    p[13] = 0.0f;
    p[17] = -0.0f;
  }
  return transpose(t, 0, 1);
}

TEST(Fp8Quantize, TheCpuKernelGivesTheReferenceBitsAndCounts) {
  MANTISSA_TRACE_SEED();
  const Tensor x = random_f32(300, 260, testing::test_seed(), true);
  for (Format f : {Format::e4m3(), Format::e5m2()}) {
    for (auto [br, bc] : {std::pair<std::int64_t, std::int64_t>{300, 260}, {1, 128}, {128, 1}, {128, 128}}) {
      for (bool deq : {false, true}) {
        const std::int64_t nbr = (300 + br - 1) / br, nbc = (260 + bc - 1) / bc;
        Tensor scales = Tensor::empty({nbr, nbc}, DType::f32);
        std::mt19937_64 rng(testing::test_seed() + 1);
        std::uniform_int_distribution<int> e(-20, 20);
        // Powers of 2 and others (delayed scaling's may be any): dequantized, the latter round in bf16.
        for (std::int64_t i = 0; i < scales.numel(); ++i) scales.data_as<float>()[i] = std::ldexp(i % 2 ? 1.0f : 1.37f, e(rng));
        Tensor fast = Tensor::empty({300, 260}, DType::bf16), ref = Tensor::empty({300, 260}, DType::bf16);
        const Fp8QuantizeStats a = quantize(x, f, scales, br, bc, deq, fast);
        Fp8QuantizeStats b;
        {
          CpuBackendScope reference(CpuBackend::reference);
          b = quantize(x, f, scales, br, bc, deq, ref);
        }
        SCOPED_TRACE(f.name() + " blocks " + std::to_string(br) + "x" + std::to_string(bc) + (deq ? " dequantized" : ""));
        const auto* pa = fast.data_as<const std::uint16_t>();
        const auto* pb = ref.data_as<const std::uint16_t>();
        for (std::int64_t i = 0; i < fast.numel(); ++i) ASSERT_EQ(pa[i], pb[i]) << "element " << i;  // NaNs too
        EXPECT_EQ(a.amax, b.amax);
        EXPECT_EQ(a.saturated, b.saturated);
        EXPECT_EQ(a.underflowed, b.underflowed);
        EXPECT_EQ(a.nonfinite, b.nonfinite);
        EXPECT_EQ(a.nonfinite, 4);
        EXPECT_GT(a.saturated + a.underflowed, 0);  // the inputs reach past both ends of the range
      }
    }
  }
}

TEST(Fp8QuantizeCurrent, TheCpuKernelGivesTheReferenceScalesBitsAndCounts) {
  MANTISSA_TRACE_SEED();
  const Tensor x = random_f32(300, 260, testing::test_seed(), true);
  for (Format f : {Format::e4m3(), Format::e5m2()}) {
    for (auto [br, bc] : {std::pair<std::int64_t, std::int64_t>{300, 260}, {1, 128}, {128, 1}, {128, 128}}) {
      for (auto [pow2, deq] : {std::pair{false, false}, {false, true}, {true, false}, {true, true}}) {
        const Shape shape{(300 + br - 1) / br, (260 + bc - 1) / bc};
        Tensor fs = Tensor::empty(shape, DType::f32), rs = Tensor::empty(shape, DType::f32);
        Tensor fast = Tensor::empty({300, 260}, DType::bf16), ref = Tensor::empty({300, 260}, DType::bf16);
        const auto run = [&](const Tensor& scales, const Tensor& out) {
          return detail::run_kernel<detail::kernel::Fp8QuantizeCurrent>(Device::cpu(), x, f, br, bc, 1, pow2, deq, scales, out);
        };
        const Fp8QuantizeStats a = run(fs, fast);
        Fp8QuantizeStats b;
        {
          CpuBackendScope reference(CpuBackend::reference);
          b = run(rs, ref);
        }
        SCOPED_TRACE(f.name() + " blocks " + std::to_string(br) + "x" + std::to_string(bc) + (pow2 ? " power of 2" : "") + (deq ? " dequantized" : ""));
        EXPECT_EQ(fs.to_doubles(), rs.to_doubles());
        const auto* pa = fast.data_as<const std::uint16_t>();
        const auto* pb = ref.data_as<const std::uint16_t>();
        for (std::int64_t i = 0; i < fast.numel(); ++i) {
          ASSERT_EQ(pa[i], pb[i]) << "element " << i;  // NaNs too: bf16's rule keeps the payload's top bits
        }
        EXPECT_EQ(a.amax, b.amax);
        EXPECT_EQ(a.saturated, b.saturated);
        EXPECT_EQ(a.underflowed, b.underflowed);
        EXPECT_EQ(a.saturated, 0);  // each block scaled to fit
      }
    }
  }
}

TEST(Fp8Amax, TheCpuKernelGivesTheReferenceBlockMaxima) {
  MANTISSA_TRACE_SEED();
  const Tensor x = random_f32(257, 300, testing::test_seed(), true);
  for (auto [br, bc] : {std::pair<std::int64_t, std::int64_t>{257, 300}, {1, 128}, {128, 1}, {128, 128}}) {
    const Shape shape{(257 + br - 1) / br, (300 + bc - 1) / bc};
    Tensor fast = Tensor::empty(shape, DType::f32), ref = Tensor::empty(shape, DType::f32);
    detail::run_kernel<detail::kernel::Fp8Amax>(Device::cpu(), x, br, bc, fast);
    {
      CpuBackendScope reference(CpuBackend::reference);
      detail::run_kernel<detail::kernel::Fp8Amax>(Device::cpu(), x, br, bc, ref);
    }
    EXPECT_EQ(fast.to_doubles(), ref.to_doubles()) << br << "x" << bc;
  }
}

// Random values already on the e4m3 grid (what the product multiplies), as bf16.
Tensor grid_values(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::randn(shape, DType::f32, seed, 0, 30);
  return cast(fp8_round_trip(t, Format::e4m3(), t.size(0), t.size(1), true), DType::bf16);
}

TEST(ScaledMatmul, TheCpuKernelMatchesTheReferenceWithinF32Accumulation) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  const std::int64_t m = 67, k = 300, n = 45;
  const Tensor a = grid_values({m, k}, seed);
  const Tensor wt = grid_values({n, k}, seed + 1);  // stored [n, k], used as the [k, n] view
  const Tensor bias = Tensor::randn({n}, DType::f32, seed + 2);
  const Tensor a3 = reshape(a, {1, m, k});
  const Tensor w3 = make_view(wt, {1, k, n}, {k * n, 1, k}, 0);
  // Values on the e4m3 grid held as the FP8 layer holds per-tensor scaled ones (in e4m3) and in bf16.
  const Tensor a8 = reshape(cast(Tensor::randn({m, k}, DType::f32, seed + 3, 0, 30), DType::e4m3), {1, m, k});
  const Tensor wt8 = cast(Tensor::randn({n, k}, DType::f32, seed + 4, 0, 30), DType::e4m3);
  const Tensor w8 = make_view(wt8, {1, k, n}, {k * n, 1, k}, 0);
  const Tensor a16 = cast(a8, DType::bf16), w16 = make_view(cast(wt8, DType::bf16), {1, k, n}, {k * n, 1, k}, 0);
  for (DType out_dtype : {DType::f32, DType::bf16}) {
    for (double alpha : {1.0, 0.0123}) {
      Tensor fast = Tensor::empty({1, m, n}, out_dtype), ref = Tensor::empty({1, m, n}, DType::f64);
      detail::run_kernel<detail::kernel::ScaledMatmul>(Device::cpu(), a3, w3, alpha, bias, fast);
      detail::run_kernel<detail::kernel::ScaledMatmul>(Device::cpu(), a3, w3, alpha, bias, ref);  // f64: the reference
      // fp8 storage is widened to bf16 in the operand's own layout: the same kernel, the same bits.
      for (const DType d : {out_dtype, DType::f64}) {
        Tensor from8 = Tensor::empty({1, m, n}, d), from16 = Tensor::empty({1, m, n}, d);
        detail::run_kernel<detail::kernel::ScaledMatmul>(Device::cpu(), a8, w8, alpha, bias, from8);
        detail::run_kernel<detail::kernel::ScaledMatmul>(Device::cpu(), a16, w16, alpha, bias, from16);
        ASSERT_EQ(std::memcmp(from8.data(), from16.data(), static_cast<std::size_t>(m * n) * dtype_size(d)), 0)
            << dtype_name(d) << " alpha " << alpha;
      }
      const std::vector<double> got = fast.to_doubles(), want = ref.to_doubles();
      const std::vector<double> av = a.to_doubles(), wv = wt.to_doubles();
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double magnitude = 0;  // sum of |terms|: f32 accumulation errs by at most k * 2^-24 of it
          for (std::int64_t p = 0; p < k; ++p) magnitude += std::fabs(av[i * k + p] * wv[j * k + p]);
          const double w = want[i * n + j];
          const double tol = static_cast<double>(k) * 0x1p-24 * magnitude * alpha +
                             (out_dtype == DType::bf16 ? 0x1p-8 * std::fabs(w) : 1e-6 * std::fabs(w));
          ASSERT_NEAR(got[i * n + j], w, tol) << dtype_name(out_dtype) << " alpha " << alpha << " at " << i << "," << j;
        }
      }
    }
  }
}

// The oracle: x quantized by the definition (scalar rule, saturating) with the given scale per element.
std::vector<double> quantized(const std::vector<double>& v, Format f, const std::vector<double>& scale) {
  std::vector<double> q(v.size());
  const CastOptions sat{Rounding::nearest_even, true, 0};
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float s = static_cast<float>(scale[i]);
    q[i] = decode(f, encode(f, static_cast<float>(v[i]) * s, sat)) / static_cast<double>(s);
  }
  return q;
}

// Per-element scales of the current recipe (one per tensor) or of block scaling.
std::vector<double> scales_of(const std::vector<double>& v, std::int64_t rows, std::int64_t cols, Format f, std::int64_t br,
                              std::int64_t bc, bool pow2) {
  const double fmax = decode(f, f.max_finite_bits());
  std::vector<double> amax(static_cast<std::size_t>(((rows + br - 1) / br) * ((cols + bc - 1) / bc)), 0.0);
  const std::int64_t nbc = (cols + bc - 1) / bc;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      double& a = amax[static_cast<std::size_t>((r / br) * nbc + c / bc)];
      a = std::max(a, std::fabs(static_cast<double>(static_cast<float>(v[static_cast<std::size_t>(r * cols + c)]))));
    }
  std::vector<double> s(v.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const double a = amax[static_cast<std::size_t>((r / br) * nbc + c / bc)];
      s[static_cast<std::size_t>(r * cols + c)] =
          pow2 ? std::ldexp(1.0, static_cast<int>(std::floor(std::log2(fmax / a)))) : static_cast<float>(fmax / a);
    }
  return s;
}

// sum_p a[i, p] b[j, p] (both row-major with k columns), and the sum of |terms| for the bound.
void product(const std::vector<double>& a, const std::vector<double>& b, std::int64_t m, std::int64_t n, std::int64_t k,
             std::vector<double>& out, std::vector<double>& magnitude) {
  out.assign(static_cast<std::size_t>(m * n), 0.0);
  magnitude.assign(out.size(), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p) {
        const double t = a[static_cast<std::size_t>(i * k + p)] * b[static_cast<std::size_t>(j * k + p)];
        out[static_cast<std::size_t>(i * n + j)] += t;
        magnitude[static_cast<std::size_t>(i * n + j)] += std::fabs(t);
      }
}

std::vector<double> transposed(const std::vector<double>& v, std::int64_t rows, std::int64_t cols) {
  std::vector<double> t(v.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[static_cast<std::size_t>(c * rows + r)] = v[static_cast<std::size_t>(r * cols + c)];
  return t;
}

void expect_within(const Tensor& got, const std::vector<double>& want, const std::vector<double>& magnitude, std::int64_t k,
                   double rounding, const char* what) {
  const std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    // f32 accumulation (k terms), the descale in f32, and the output's rounding.
    const double tol = (static_cast<double>(k) + 2) * 0x1p-24 * magnitude[i] + rounding * std::fabs(want[i]) + 1e-30;
    ASSERT_NEAR(g[i], want[i], tol) << what << " element " << i;
  }
}

class Fp8LinearOracle : public ::testing::TestWithParam<QuantRecipe> {};

TEST_P(Fp8LinearOracle, ForwardAndBackwardAreTheQuantizedProductsOfTheDefinition) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  const std::int64_t m = 40, k = 200, n = 24;  // k past one 128 block, so block scales differ
  for (Fp8Format format : {Fp8Format::hybrid, Fp8Format::e4m3}) {
    SCOPED_TRACE(std::string(fp8_format_name(format)));
    QuantOptions o;
    o.recipe = GetParam();
    o.format = format;
    const auto state = std::make_shared<QuantState>(o);
    // x and the output gradient with an outlier row, to make the recipes' scales differ.
    Tensor x = Tensor::randn({m, k}, DType::f32, seed, 0, 1);
    x.data_as<float>()[5 * k + 3] = 900;
    x.set_requires_grad();
    Tensor w = Tensor::randn({n, k}, DType::f32, seed + 1, 0, 0.05);
    w.set_requires_grad();
    Tensor b = Tensor::randn({n}, DType::f32, seed + 2);
    b.set_requires_grad();
    const Tensor g = Tensor::randn({m, n}, DType::f32, seed + 3, 0, 1e-3);
    Tensor y;
    {
      Autocast bf16(DType::bf16);
      y = fp8_linear(x, w, b, state);
    }
    ASSERT_EQ(y.dtype(), DType::bf16);
    y.backward(cast(g, DType::bf16));

    const bool block = o.recipe == QuantRecipe::block;
    const Format e4 = Format::e4m3(), e5 = o.backward_format();
    const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles(), bv = b.to_doubles();
    const std::vector<double> gv = cast(cast(g, DType::bf16), DType::f32).to_doubles();
    // The delayed recipe's first step scales each tensor by its own amax, as the current recipe does.
    const auto q = [&](const std::vector<double>& v, std::int64_t r, std::int64_t c, Format f, std::int64_t br,
                       std::int64_t bc) {
      return quantized(v, f, block ? scales_of(v, r, c, f, br, bc, true) : scales_of(v, r, c, f, r, c, false));
    };
    std::vector<double> want, mag;
    product(q(xv, m, k, e4, 1, 128), q(wv, n, k, e4, 128, 128), m, n, k, want, mag);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) want[static_cast<std::size_t>(i * n + j)] += bv[static_cast<std::size_t>(j)];
    expect_within(y, want, mag, k, 0x1p-8, "y");

    // dx = q(g) . q(w): [m, n] . [n, k]
    const std::vector<double> gq_rows = q(gv, m, n, e5, 1, 128);
    product(gq_rows, transposed(q(wv, n, k, e4, 128, 128), n, k), m, k, n, want, mag);
    expect_within(x.grad(), want, mag, n, 0x1p-24, "dx");
    // dw = q(g)^T . q(x): the inner dimension is m; block scaling quantizes both again in column blocks.
    const std::vector<double> gq_cols = block ? q(gv, m, n, e5, 128, 1) : gq_rows;
    const std::vector<double> xq_cols = block ? q(xv, m, k, e4, 128, 1) : q(xv, m, k, e4, 1, 128);
    product(transposed(gq_cols, m, n), transposed(xq_cols, m, k), n, k, m, want, mag);
    expect_within(w.grad(), want, mag, m, 0x1p-24, "dw");
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8LinearOracle, ::testing::Values(QuantRecipe::delayed, QuantRecipe::current, QuantRecipe::block),
                         testing::recipe_label<QuantRecipe>);

// The microscaled recipes' layer against its definition: each operand of each product quantized from the
// high-precision tensor (by quantize_blocks, itself checked against torchao's in microscale_test.cpp) in
// blocks along that product's inner dimension, NVFP4's tensor scale applied to the result, its weight in
// 16 x 16 blocks for both products and the Hadamard transform on the weight-gradient operands; the
// products summed in double. (Stochastic rounding off here: its draws are checked in microscale_test.)
// `hadamard`: the recipe whose transform (its signs; the result rounded to bf16 where the row says so and
// the operand is bf16) comes first, or none.
std::vector<double> block_quantized(const std::vector<double>& v, std::int64_t rows, std::int64_t cols, QuantSpec spec,
                                    bool inner_is_rows, const RecipeInfo* hadamard = nullptr, DType operand = DType::f32) {
  if (inner_is_rows) std::swap(spec.block_rows, spec.block_cols);
  std::vector<float> f(v.begin(), v.end());
  if (hadamard != nullptr) {
    hadamard16(f, rows, cols, true, hadamard->hadamard_signs);
    if (hadamard->hadamard_in_operand_dtype && operand == DType::bf16) {
      for (float& e : f) e = static_cast<float>(decode(Format::bf16(), encode(Format::bf16(), e)));
    }
  }
  const QuantizedBlocks q = quantize_blocks(f, rows, cols, spec);
  const std::vector<float> back = dequantize_blocks(q, rows, cols, spec);
  return {back.begin(), back.end()};
}

void expect_block_scaled_layer_is_its_definition(const QuantOptions& o) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  const std::int64_t m = 48, k = 64, n = 32;  // m a multiple of 16: the transform applies
  const auto state = std::make_shared<QuantState>(o);
  Tensor x = Tensor::randn({m, k}, DType::f32, seed, 0, 1);
  x.data_as<float>()[5 * k + 3] = 60;  // an outlier
  x.set_requires_grad();
  Tensor w = Tensor::randn({n, k}, DType::f32, seed + 1, 0, 0.05);
  w.set_requires_grad();
  const Tensor g = Tensor::randn({m, n}, DType::f32, seed + 3, 0, 1e-3);
  Tensor y;
  {
    Autocast bf16(DType::bf16);
    y = fp8_linear(x, w, Tensor(), state);
  }
  y.backward(cast(g, DType::bf16));
  const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles();
  const std::vector<double> gv = cast(cast(g, DType::bf16), DType::f32).to_doubles();
  const QuantSpec xs = o.spec(Fp8Operand::input), ws = o.spec(Fp8Operand::weight);
  const QuantSpec gs = o.spec(Fp8Operand::grad_output);
  const bool nv = o.recipe.info().nvfp4_parts;
  EXPECT_EQ(ws.block_rows, nv ? 16 : 1);
  std::vector<double> want, mag;
  product(block_quantized(xv, m, k, xs, false), block_quantized(wv, n, k, ws, false), m, n, k, want, mag);
  expect_within(y, want, mag, k, 0x1p-8, "y");
  // dx = q(g) . q(w), the inner dimension w's rows (its 16 x 16 blocks are the forward's).
  product(block_quantized(gv, m, n, gs, false), transposed(block_quantized(wv, n, k, ws, !nv), n, k), m, k, n,
          want, mag);
  expect_within(x.grad(), want, mag, n, 0x1p-24, "dx");
  // dw = q(H g)^T . q(H x), the inner dimension the rows of both.
  // (The transform's signs are the recipe's row's; g arrives in bf16, x in f32.)
  const RecipeInfo* h = nv ? &o.recipe.info() : nullptr;
  product(transposed(block_quantized(gv, m, n, gs, true, h, DType::bf16), m, n), transposed(block_quantized(xv, m, k, xs, true, h), m, k),
          n, k, m, want, mag);
  expect_within(w.grad(), want, mag, m, 0x1p-24, "dw");
  // Nothing but stochastic rounding counts draws.
  EXPECT_EQ(state->rounding_calls().to_doubles(), std::vector<double>{0.0});
}

class BlockScaledLinearOracle : public ::testing::TestWithParam<QuantRecipe> {};

TEST_P(BlockScaledLinearOracle, ForwardAndBackwardAreTheQuantizedProductsOfTheDefinition) {
  expect_block_scaled_layer_is_its_definition(QuantOptions{.recipe = GetParam(), .nvfp4_sr = false});
}

// nvfp4 is Transformer Engine's (its scale rule, its sign vector, the transform rounded to the operand's
// dtype); nvfp4-torchao keeps torchao's rule and mantissa's earlier signs, and its layer is its definition
// too (the parameterized case above runs every row).
TEST(BlockScaledLinearOracle, Nvfp4IsTransformerEnginesAndNvfp4TorchaoIsTheEarlierOne) {
  for (const Fp8Operand op : {Fp8Operand::input, Fp8Operand::weight, Fp8Operand::grad_output}) {
    EXPECT_EQ(QuantOptions{.recipe = QuantRecipe::nvfp4}.spec(op).rule, ScaleRule::te);
    EXPECT_EQ(QuantOptions{.recipe = QuantRecipe::nvfp4_torchao}.spec(op).rule, ScaleRule::floor);
  }
  EXPECT_EQ(QuantRecipe::nvfp4.info().hadamard_signs, 0xd7e8);
  EXPECT_TRUE(QuantRecipe::nvfp4.info().hadamard_in_operand_dtype);
  EXPECT_EQ(QuantRecipe::nvfp4_torchao.info().hadamard_signs, 0xb4e1);
  EXPECT_FALSE(QuantRecipe::nvfp4_torchao.info().hadamard_in_operand_dtype);
}

// Every microscaled row of the recipe table.
std::vector<QuantRecipe> microscaled_recipes() {
  std::vector<QuantRecipe> out;
  for (const QuantRecipe r : QuantRecipe::all()) {
    if (r.info().microscaled()) out.push_back(r);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Recipes, BlockScaledLinearOracle, ::testing::ValuesIn(microscaled_recipes()),
                         testing::recipe_label<QuantRecipe>);

TEST(QuantOptions, TheMicroscaledRecipesSayWhatTheyRun) {
  EXPECT_EQ(QuantOptions{.recipe = QuantRecipe::mxfp8}.str(), "mxfp8 (e4m3 1x32 e8m0 rceil nearest)");
  const QuantOptions floor{.recipe = QuantRecipe::mxfp4, .mx_rule = ScaleRule::floor};
  EXPECT_EQ(floor.str(), "mxfp4 (e2m1 1x32 e8m0 floor nearest)");
  EXPECT_EQ(QuantOptions{.recipe = QuantRecipe::nvfp4}.str(),
            "nvfp4 (e2m1 1x16 e4m3*f32 te nearest; weights 16x16, RHT on, gradients stochastic)");
  EXPECT_EQ(QuantOptions{.recipe = QuantRecipe::nvfp4_torchao}.str(),
            "nvfp4-torchao (e2m1 1x16 e4m3*f32 nearest; weights 16x16, RHT on, gradients stochastic)");
  const QuantOptions ablated{.recipe = QuantRecipe::nvfp4, .nvfp4_rht = false, .nvfp4_sr = false, .nvfp4_2d_weights = false};
  EXPECT_EQ(ablated.spec(Fp8Operand::weight).block_rows, 1);
  EXPECT_EQ(ablated.spec(Fp8Operand::grad_output).rounding, Rounding::nearest_even);
  EXPECT_EQ(QuantOptions{.recipe = QuantRecipe::nvfp4}.spec(Fp8Operand::grad_output).rounding, Rounding::stochastic);
  EXPECT_EQ(QuantRecipe::parse("nvfp4"), QuantRecipe::nvfp4);
}

TEST(Fp8Linear, AnEmptyBatchAndMisfitShapes) {
  for (QuantRecipe r : {QuantRecipe::delayed, QuantRecipe::current, QuantRecipe::block}) {
    const auto state = std::make_shared<QuantState>(QuantOptions{.recipe = r});
    Tensor w = Tensor::randn({3, 5}, DType::f32, 1);
    w.set_requires_grad();
    Autocast bf16(DType::bf16);
    const Tensor y = fp8_linear(Tensor::zeros({0, 5}, DType::f32), w, Tensor(), state);
    EXPECT_EQ(y.shape(), (Shape{0, 3}));
    EXPECT_THROW(fp8_linear(Tensor::zeros({2, 4}, DType::f32), w, Tensor(), state), std::invalid_argument);
    EXPECT_THROW(fp8_linear(Tensor::zeros({2, 5}, DType::f32), w, Tensor::zeros({4}, DType::f32), state), std::invalid_argument);
  }
}

TEST(QuantState, DelayedScalingKeepsAHistoryAndScalesFromItsMaximum) {
  QuantOptions o;
  o.amax_history = 3;
  o.margin = 1;
  QuantState s(o);
  EXPECT_FALSE(s.delayed_scale(Fp8Operand::input).has_value());  // nothing seen yet: the op scales by x itself
  s.record(Fp8Operand::input, 2.0);
  s.record(Fp8Operand::input, 4.0);  // two uses in a step: the larger counts
  s.record(Fp8Operand::grad_output, std::numeric_limits<double>::infinity());  // not recorded
  EXPECT_EQ(s.end_step(), 1);
  EXPECT_FLOAT_EQ(*s.delayed_scale(Fp8Operand::input), 448.0f / 4 / 2);
  EXPECT_FALSE(s.delayed_scale(Fp8Operand::grad_output).has_value());
  for (double a : {1.0, 1.0}) {
    s.record(Fp8Operand::input, a);
    s.end_step();
  }
  EXPECT_FLOAT_EQ(*s.delayed_scale(Fp8Operand::input), 448.0f / 4 / 2);  // 4 still in the history of 3
  s.record(Fp8Operand::input, 1.0);
  s.end_step();
  EXPECT_FLOAT_EQ(*s.delayed_scale(Fp8Operand::input), 448.0f / 1 / 2);  // 4 rolled out
  EXPECT_EQ(s.amax_history().to_doubles(), (std::vector<double>{1, 0, 0, 1, 0, 0, 1, 0, 0}));

  o.reduction = AmaxReduction::most_recent;
  QuantState recent(o);
  for (double a : {8.0, 2.0}) {
    recent.record(Fp8Operand::weight, a);
    recent.end_step();
  }
  EXPECT_FLOAT_EQ(*recent.delayed_scale(Fp8Operand::weight), 448.0f / 2 / 2);

  s.amax_history().data_as<float>()[4] = -1;
  EXPECT_THROW(s.validate(), std::invalid_argument);
}

// What data parallel does between the ranks: the step's amaxes out (-1 where an operand was not seen),
// the largest of the ranks' back in, and end_step() scales from them.
TEST(QuantState, TheStepsAmaxesGoOutAndComeBackBeforeEndStep) {
  QuantState s(QuantOptions{});
  s.record(Fp8Operand::input, 2.0);
  s.record(Fp8Operand::grad_output, 0.5);
  EXPECT_EQ(s.step_amax(), (std::array<double, kFp8Operands>{2.0, -1.0, 0.5}));
  s.set_step_amax({8.0, -1.0, 0.25});  // another rank saw a larger input and a smaller gradient
  EXPECT_EQ(s.end_step(), 2);
  EXPECT_FLOAT_EQ(*s.delayed_scale(Fp8Operand::input), 448.0f / 8);
  EXPECT_FALSE(s.delayed_scale(Fp8Operand::weight).has_value());
  EXPECT_FLOAT_EQ(*s.delayed_scale(Fp8Operand::grad_output), 57344.0f / 0.25f);
  EXPECT_EQ(s.step_amax(), (std::array<double, kFp8Operands>{-1.0, -1.0, -1.0}));  // a new step begins unseen
}

TEST(QuantOptions, ParseNamesAndRefuseTheRest) {
  EXPECT_EQ(QuantRecipe::parse("block"), QuantRecipe::block);
  EXPECT_EQ(parse_fp8_format("e4m3"), Fp8Format::e4m3);
  EXPECT_THROW(QuantRecipe::parse("tensorwise"), std::invalid_argument);
  EXPECT_THROW(parse_fp8_format("e5m2"), std::invalid_argument);
  QuantOptions o;
  o.amax_history = 0;
  EXPECT_THROW(o.check(), std::invalid_argument);
  EXPECT_EQ(QuantOptions{}.str(), "delayed (hybrid, history 1024, max, margin 0)");
}

// The FP8 layer policy, resolved into the run's precision plan and applied.
train::PrecisionPlan fp8_plan(nn::Module& m, const nn::Fp8Policy& layers, std::vector<std::string> f32_layers = {}) {
  train::PrecisionPolicy policy = train::parse_precision_policy("fp8");
  policy.fp8_layers = layers;
  policy.f32_layers = std::move(f32_layers);
  train::PrecisionPlan plan = train::plan_precision(m, policy);
  train::apply_precision_plan(m, plan);
  return plan;
}

TEST(Fp8Policy, KeepsTheFirstAndLastLinearLayersInBf16UnlessTold) {
  using train::LayerPrecision;
  nn::Mlp mlp(nn::MlpConfig{.in = 8, .hidden = 4, .layers = 3, .classes = 2});
  const train::PrecisionPlan plan = fp8_plan(mlp, {});
  const std::map<std::string, LayerPrecision> expected = {
      {"fc0", LayerPrecision::low}, {"fc1", LayerPrecision::quantized}, {"fc2", LayerPrecision::quantized}, {"fc3", LayerPrecision::low}};
  EXPECT_EQ(plan.layers, expected);
  EXPECT_EQ(plan.str(), "fp8 in 2 of 4 layers (delayed): fc1, fc2; bf16 in 2: fc0 (first layer), fc3 (last layer)");
  // Every fp8 layer with its recipe and the spec of each operand (delayed: one f32 scale per tensor).
  const std::string recipe = " " + QuantOptions{}.str() +
                             "\n    input: e4m3 tensor f32 fit nearest\n    weight: e4m3 tensor f32 fit nearest"
                             "\n    grad_output: e5m2 tensor f32 fit nearest";
  EXPECT_EQ(plan.str(true).substr(plan.str().size()),
            "\n  fc0 (first layer): bf16\n  fc1: fp8" + recipe + "\n  fc2: fp8" + recipe + "\n  fc3 (last layer): bf16");
  // Delayed scaling's state is in the buffers a checkpoint saves (the two FP8 layers' only).
  EXPECT_EQ(mlp.named_buffers().size(), 4u);

  nn::Mlp other(nn::MlpConfig{.in = 8, .hidden = 4, .layers = 3, .classes = 2});
  const train::PrecisionPlan custom = fp8_plan(other, {.kept = KeptLayers::first_last, .bf16_layers = {"fc2"}, .fp8_layers = {"fc0"}});
  EXPECT_EQ(custom.layers.at("fc0"), LayerPrecision::quantized);
  EXPECT_EQ(custom.layers.at("fc1"), LayerPrecision::quantized);
  EXPECT_EQ(custom.layers.at("fc2"), LayerPrecision::low);
  EXPECT_EQ(custom.reasons.at("fc2"), "bf16 layers");
  EXPECT_EQ(custom.reasons.at("fc0"), "fp8 layers");
  nn::Mlp third(nn::MlpConfig{.in = 8, .hidden = 4, .layers = 1, .classes = 2});
  EXPECT_THROW(fp8_plan(third, {.kept = KeptLayers::first_last, .bf16_layers = {"fc9"}, .fp8_layers = {}}), std::invalid_argument);
  // An f32 layer outranks the FP8 policy, and a keep_in_f32() set on a module before is in the plan.
  nn::Mlp fourth(nn::MlpConfig{.in = 8, .hidden = 4, .layers = 3, .classes = 2});
  fourth.named_modules()[3].second->keep_in_f32();  // fc2 ("" is the model itself)
  const train::PrecisionPlan kept = fp8_plan(fourth, {.kept = KeptLayers::none, .bf16_layers = {}, .fp8_layers = {}}, {"fc1"});
  EXPECT_EQ(kept.str(), "fp8 in 2 of 4 layers (delayed): fc0, fc3; fp32 in 2: fc1 (fp32 layers), fc2 (keep_in_f32)");
  EXPECT_EQ(fourth.named_buffers().size(), 4u);  // no FP8 state in the f32 layers
}

// NVFP4 keeps what NVIDIA's recipe keeps in bf16: the first linear layer and those of the last blocks,
// about 15% of them and at least one (GPT-2's 12 blocks: 2); on a model without numbered blocks each
// linear layer is one (the MLP: its first and last, as the other recipes keep). --fp8-first-last bf16
// (KeptLayers::first_last) gives mantissa's earlier choice.
TEST(Fp8Policy, Nvfp4KeepsTheFirstLayerAndTheLastBlocksInBf16) {
  using train::LayerPrecision;
  const auto plan = [](nn::Module& m, std::optional<KeptLayers> kept) {
    train::PrecisionPolicy policy = train::parse_precision_policy("nvfp4");
    policy.fp8_layers.kept = kept;
    return train::plan_precision(m, policy);
  };
  const auto bf16 = [](const train::PrecisionPlan& p) {
    std::vector<std::string> out;
    for (const auto& [path, level] : p.layers) {
      if (level == LayerPrecision::low) out.push_back(path + " (" + p.reasons.at(path) + ")");
    }
    return out;
  };
  nn::Gpt four(nn::GptConfig{.n_layer = 4, .n_head = 2, .n_embd = 16, .block_size = 8});
  EXPECT_EQ(bf16(plan(four, std::nullopt)),
            (std::vector<std::string>{"blocks.0.attn.qkv (first layer)", "blocks.3.attn.proj (last 1 of 4 blocks)",
                                      "blocks.3.attn.qkv (last 1 of 4 blocks)", "blocks.3.mlp.fc (last 1 of 4 blocks)",
                                      "blocks.3.mlp.proj (last 1 of 4 blocks)"}));
  EXPECT_EQ(bf16(plan(four, KeptLayers::first_last)),
            (std::vector<std::string>{"blocks.0.attn.qkv (first layer)", "blocks.3.mlp.proj (last layer)"}));
  EXPECT_TRUE(bf16(plan(four, KeptLayers::none)).empty());
  nn::Gpt twelve(nn::GptConfig{.n_layer = 12, .n_head = 2, .n_embd = 16, .block_size = 8});
  const train::PrecisionPlan p12 = plan(twelve, std::nullopt);
  EXPECT_EQ(bf16(p12).size(), 9u);  // the first, and blocks 10 and 11 (2 of 12, 17%)
  EXPECT_EQ(p12.layers.at("blocks.9.mlp.proj"), LayerPrecision::quantized);
  EXPECT_EQ(p12.reasons.at("blocks.10.attn.qkv"), "last 2 of 12 blocks");
  nn::Mlp mlp(nn::MlpConfig{.in = 8, .hidden = 4, .layers = 3, .classes = 2});
  EXPECT_EQ(bf16(plan(mlp, std::nullopt)), (std::vector<std::string>{"fc0 (first layer)", "fc3 (last 1 of 4 blocks)"}));
  // nvfp4-torchao keeps mantissa's earlier choice, so its runs compute what nvfp4's did.
  train::PrecisionPolicy torchao = train::parse_precision_policy("nvfp4-torchao");
  EXPECT_EQ(bf16(train::plan_precision(four, torchao)),
            (std::vector<std::string>{"blocks.0.attn.qkv (first layer)", "blocks.3.mlp.proj (last layer)"}));
}

// A plan carries its recipes: the run's, and a layer's own (a plan file's), each with the parameters
// its recipe reads; they survive the plan's JSON, reach the layers, and print.
TEST(PrecisionPlan, RecipesTravelInItsJsonAndALayerCanHaveItsOwn) {
  using train::LayerPrecision;
  for (const QuantRecipe r : QuantRecipe::all()) {
    SCOPED_TRACE(std::string(r.name()));
    train::PrecisionPlan plan;
    plan.layers = {{"fc0", LayerPrecision::quantized}, {"fc1", LayerPrecision::quantized}};
    // Every parameter away from its default, that the JSON must carry.
    plan.fp8 = {.recipe = r, .format = Fp8Format::e4m3, .amax_history = 16, .reduction = AmaxReduction::most_recent,
                .margin = 2, .block = 64, .nvfp4_rht = false, .nvfp4_sr = false, .nvfp4_2d_weights = false,
                .mx_rule = ScaleRule::even, .seed = 9};
    const train::PrecisionPlan back = train::PrecisionPlan::parse(plan.json());
    EXPECT_EQ(back.json(), plan.json());
    EXPECT_EQ(back.fp8.recipe, r);
    EXPECT_EQ(back.fp8.str(), plan.fp8.str());
    plan.recipes["fc1"] = {.recipe = QuantRecipe::nvfp4};
    EXPECT_TRUE(train::PrecisionPlan::parse(plan.json()).recipes.at("fc1") == QuantOptions{.recipe = QuantRecipe::nvfp4});
  }

  const train::PrecisionPlan plan = train::PrecisionPlan::parse(
      R"({"low": "bf16", "fp8": {"recipe": "mxfp8", "mx_scale": "floor"},
          "layers": {"fc0": "bf16", "fc1": {"level": "fp8", "recipe": "nvfp4"}, "fc2": "fp8", "fc3": "bf16"}})");
  EXPECT_EQ(plan.str(), "mxfp8 in 2 of 4 layers: fc1 [nvfp4], fc2; bf16 in 2: fc0, fc3");
  const std::string every = plan.str(true);
  EXPECT_NE(every.find("fc1 [nvfp4]: nvfp4 (e2m1 1x16 e4m3*f32 te nearest; weights 16x16, RHT on, gradients stochastic)\n"
                       "    input: e2m1 1x16 e4m3*f32 te nearest\n    weight: e2m1 16x16 e4m3*f32 te nearest\n"
                       "    grad_output: e2m1 1x16 e4m3*f32 te stochastic"),
            std::string::npos) << every;
  EXPECT_NE(every.find("fc2: mxfp8 (e4m3 1x32 e8m0 floor nearest)"), std::string::npos) << every;
  nn::Mlp mlp(nn::MlpConfig{.in = 32, .hidden = 32, .layers = 3, .classes = 2});
  train::apply_precision_plan(mlp, plan);
  const auto state = [&](const char* name) {
    for (const auto& [path, m] : mlp.named_modules()) {
      if (path == name) return dynamic_cast<nn::Linear*>(m)->fp8();
    }
    return std::shared_ptr<QuantState>();
  };
  ASSERT_TRUE(state("fc1") && state("fc2"));
  EXPECT_FALSE(state("fc0"));
  EXPECT_EQ(state("fc1")->options().recipe, QuantRecipe::nvfp4);
  EXPECT_EQ(state("fc1")->options().seed, 2u);  // the second linear layer's stream
  EXPECT_EQ(state("fc2")->options().recipe, QuantRecipe::mxfp8);
  EXPECT_EQ(state("fc2")->options().mx_rule, ScaleRule::floor);
  {
    Autocast bf16(DType::bf16);
    mlp.forward(Tensor::randn({4, 32}, DType::f32, 3));
  }
  EXPECT_EQ(state("fc1")->counters().quantized, 4 * 32 + 32 * 32);  // the forward product's input and weight
  EXPECT_GT(state("fc2")->counters().quantized, 0);
  // A layer already running fp8 by another recipe is not switched silently.
  train::PrecisionPlan other = plan;
  other.recipes.clear();
  EXPECT_THROW(train::apply_precision_plan(mlp, other), std::invalid_argument);

  // What a hand-written plan gets wrong, named.
  const auto refusal = [](const char* json) {
    try {
      train::PrecisionPlan::parse(json);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal(R"({"low": "bf16", "fp8": {"recipe": "mxfp8", "rht": false}, "layers": {}})"),
            "\"fp8\": the mxfp8 recipe has no parameter \"rht\"");
  EXPECT_EQ(refusal(R"({"low": "bf16", "layers": {"fc0": {"level": "bf16", "recipe": "nvfp4"}}})"),
            "layer \"fc0\": only a quantized layer has a recipe");
  EXPECT_NE(refusal(R"({"low": "bf16", "layers": {"fc0": {"level": "fp8", "recipe": "fp6"}}})").find("layer \"fc0\": "), std::string::npos);
  EXPECT_NE(refusal(R"({"low": "bf16", "fp8": {"margin": 1}, "layers": {}})").find("\"fp8\""), std::string::npos);
}

// A quantized layer's level names its recipe ("fp8" for the FP8 recipes, a microscaled recipe's name),
// under the plan's "quantized" recipe; plans in the words before ("fp8" for both) read as the same plan.
TEST(PrecisionPlan, AQuantizedLayersLevelNamesItsRecipeAndOldPlansReadTheSame) {
  const train::PrecisionPlan old_words = train::PrecisionPlan::parse(
      R"({"low": "bf16", "fp8": {"recipe": "nvfp4"}, "layers": {"fc0": "fp8", "fc1": {"level": "fp8", "recipe": "mxfp8"}, "fc2": "bf16"}})");
  const train::PrecisionPlan new_words = train::PrecisionPlan::parse(
      R"({"low": "bf16", "quantized": {"recipe": "nvfp4"}, "layers": {"fc0": "nvfp4", "fc1": "mxfp8", "fc2": "bf16"}})");
  EXPECT_EQ(old_words.json(), new_words.json());
  const nlohmann::json j = nlohmann::json::parse(new_words.json());
  EXPECT_FALSE(j.contains("fp8")) << j;
  EXPECT_EQ(j.at("quantized").at("recipe"), "nvfp4");
  EXPECT_EQ(j.at("layers").at("fc0"), "nvfp4");
  EXPECT_EQ(j.at("layers").at("fc1").at("level"), "mxfp8");
  EXPECT_EQ(new_words.recipe_of("fc1").recipe, QuantRecipe::mxfp8);  // a level naming another recipe: that one
  EXPECT_EQ(new_words.recipe_of("fc0").recipe, QuantRecipe::nvfp4);
  EXPECT_EQ(train::PrecisionPlan::parse(new_words.json()).json(), new_words.json());
  // FP8 recipes keep the word fp8: the layer is FP8 whichever scaling it has.
  const train::PrecisionPlan fp8 =
      train::PrecisionPlan::parse(R"({"low": "bf16", "quantized": {"recipe": "delayed"}, "layers": {"fc0": "fp8", "fc1": "bf16"}})");
  EXPECT_EQ(nlohmann::json::parse(fp8.json()).at("layers").at("fc0"), "fp8");
  EXPECT_EQ(fp8.recipe_of("fc0").recipe, QuantRecipe::delayed);
  for (const char* refused : {R"({"low": "bf16", "quantized": "mxfp8", "fp8": "mxfp8", "layers": {}})",
                              R"({"low": "bf16", "layers": {"fc0": {"level": "nvfp4", "recipe": "mxfp8"}}})",
                              R"({"low": "bf16", "layers": {"fc0": "delayed"}})"}) {
    EXPECT_THROW(train::PrecisionPlan::parse(refused), std::invalid_argument) << refused;
  }
}

TEST(Fp8Policy, ALayerKeptInF32DoesNotRunInFp8) {
  nn::Linear layer(16, 8, 1);
  layer.enable_fp8({.recipe = QuantRecipe::current});
  const Tensor x = Tensor::randn({4, 16}, DType::f32, 2);
  reset_fp8_counters();
  {
    Autocast bf16(DType::bf16);
    layer.forward(x);
  }
  EXPECT_EQ(fp8_counters().quantized, 4 * 16 + 8 * 16);
  layer.keep_in_f32();
  reset_fp8_counters();
  Tensor y;
  {
    Autocast bf16(DType::bf16);
    y = layer.forward(x);
  }
  EXPECT_EQ(fp8_counters().quantized, 0);
  EXPECT_EQ(y.dtype(), DType::f32);
}

// The case block scaling exists for: a row ("massive activations") 2^18 times larger than the
// rest. One scale for the whole tensor pushes the ordinary rows below e4m3's smallest values; a scale per
// 1 x 128 block keeps them.
TEST(Fp8Recipes, BlockScalingKeepsWhatOneScalePerTensorLosesToOutliers) {
  MANTISSA_TRACE_SEED();
  Tensor x = Tensor::randn({64, 256}, DType::f32, testing::test_seed(), 0, 1);
  for (std::int64_t c = 0; c < 256; ++c) x.data_as<float>()[7 * 256 + c] *= 262144;
  const auto error_of_ordinary_rows = [&](const Tensor& q) {
    const std::vector<double> a = x.to_doubles(), b = q.to_doubles();
    double err = 0, ref = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (i / 256 == 7) continue;
      err += (a[i] - b[i]) * (a[i] - b[i]);
      ref += a[i] * a[i];
    }
    return std::sqrt(err / ref);
  };
  const double tensor = error_of_ordinary_rows(fp8_round_trip(x, Format::e4m3(), 64, 256, false));
  const double blocks = error_of_ordinary_rows(fp8_round_trip(x, Format::e4m3(), 1, 128, true));
  EXPECT_GT(tensor, 0.5);   // most of the ordinary values underflow
  EXPECT_LT(blocks, 0.05);  // e4m3's own rounding error (2^-4 at most per value)
}

// What the GPU's fp8 tensor-core path relies on (it multiplies operands held in fp8 dtypes as they are):
// a spy in place of the cpu ScaledMatmul records each product's operand dtypes, which say the grid the
// values lie on. The per-tensor recipes hand e4m3 operands forward and their gradient format backward
// (one byte a value), over two steps (the delayed recipe's second uses its history); block scaling,
// whose values come scaled back, hands bf16.
struct SeenProduct {
  DType a, w;
};
std::vector<SeenProduct> g_seen;
detail::kernel::ScaledMatmul::Fn* g_real_scaled_matmul = nullptr;

void spy_scaled_matmul(const Tensor& a, const Tensor& w, const detail::ProductScale& scale, const Tensor& bias,
                       const Tensor& out) {
  g_seen.push_back({a.dtype(), w.dtype()});
  g_real_scaled_matmul(a, w, scale, bias, out);
}

// set_fp8_storage for one scope.
struct Fp8StorageScope {
  Fp8Storage saved = fp8_storage();
  explicit Fp8StorageScope(Fp8Storage s) { set_fp8_storage(s); }
  ~Fp8StorageScope() { set_fp8_storage(saved); }
  Fp8StorageScope(const Fp8StorageScope&) = delete;
  Fp8StorageScope& operator=(const Fp8StorageScope&) = delete;
};

TEST(Fp8Linear, PerTensorScaledOperandsReachTheProductsInTheirFp8Grids) {
  detail::impl_for(Device::cpu());  // registers the kernels
  auto& slot = detail::KernelTable<detail::kernel::ScaledMatmul>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
  g_real_scaled_matmul = slot;
  slot = spy_scaled_matmul;
  // Held in the grids' dtypes as on a GPU (on the CPU, automatic storage holds bf16: checked below).
  const Fp8StorageScope storage(Fp8Storage::grid);
  for (const QuantRecipe recipe : {QuantRecipe::delayed, QuantRecipe::current, QuantRecipe::block}) {
    for (const Fp8Format format : {Fp8Format::hybrid, Fp8Format::e4m3}) {
      SCOPED_TRACE(std::string(recipe.name()) + " " + std::string(fp8_format_name(format)));
      QuantOptions o;
      o.recipe = recipe;
      o.format = format;
      const auto state = std::make_shared<QuantState>(o);
      const Tensor w = Tensor::randn({48, 64}, DType::f32, 2, 0, 0.05).set_requires_grad();
      for (int step = 0; step < 2; ++step) {
        g_seen.clear();
        const Tensor x = Tensor::randn({32, 64}, DType::f32, 3 + step, 0, 3).set_requires_grad();
        Tensor y;
        {
          Autocast bf16(DType::bf16);
          y = fp8_linear(x, w, Tensor(), state);
        }
        y.backward(Tensor::randn({32, 48}, DType::bf16, 9, 0, 1e-3));
        if (recipe == QuantRecipe::delayed) state->end_step();
        ASSERT_EQ(g_seen.size(), 3U) << "step " << step;  // y, dx, dw
        const DType grad = format == Fp8Format::hybrid ? DType::e5m2 : DType::e4m3;
        const bool block = recipe == QuantRecipe::block;
        const DType want[3][2] = {{DType::e4m3, DType::e4m3}, {grad, DType::e4m3}, {grad, DType::e4m3}};
        for (std::size_t p = 0; p < 3; ++p) {
          EXPECT_EQ(g_seen[p].a, block ? DType::bf16 : want[p][0]) << "product " << p << " step " << step;
          EXPECT_EQ(g_seen[p].w, block ? DType::bf16 : want[p][1]) << "product " << p << " step " << step;
        }
      }
    }
  }
  slot = g_real_scaled_matmul;
}

// Held in fp8 or in bf16, the layer's values are the same: its output and both gradients, bit for bit,
// over two steps of each per-tensor recipe (the delayed one's second from its history); and the CPU's
// automatic storage is bf16 (its products read bf16).
TEST(Fp8Linear, HeldInFp8OrInBf16TheLayerGivesTheSameBits) {
  detail::impl_for(Device::cpu());
  auto& slot = detail::KernelTable<detail::kernel::ScaledMatmul>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
  g_real_scaled_matmul = slot;
  slot = spy_scaled_matmul;
  for (const QuantRecipe recipe : {QuantRecipe::delayed, QuantRecipe::current}) {
    for (const Fp8Format format : {Fp8Format::hybrid, Fp8Format::e4m3}) {
      SCOPED_TRACE(std::string(recipe.name()) + " " + std::string(fp8_format_name(format)));
      std::vector<std::vector<double>> seen[2];
      for (const Fp8Storage storage : {Fp8Storage::grid, Fp8Storage::automatic}) {
        const Fp8StorageScope scope(storage);
        QuantOptions o;
        o.recipe = recipe;
        o.format = format;
        const auto state = std::make_shared<QuantState>(o);
        const Tensor w = Tensor::randn({40, 96}, DType::f32, 12, 0, 0.05).set_requires_grad();
        const Tensor bias = Tensor::randn({40}, DType::f32, 13, 0, 0.1).set_requires_grad();
        for (int step = 0; step < 2; ++step) {
          g_seen.clear();
          const Tensor x = Tensor::randn({64, 96}, DType::f32, 14 + step, 0, 3).set_requires_grad();
          Tensor y;
          {
            Autocast bf16(DType::bf16);
            y = fp8_linear(x, w, bias, state);
          }
          y.backward(Tensor::randn({64, 40}, DType::bf16, 16 + step, 0, 1e-3));
          if (recipe == QuantRecipe::delayed) state->end_step();
          for (const Tensor& t : {y, x.grad(), w.grad(), bias.grad()}) seen[storage == Fp8Storage::grid].push_back(t.to_doubles());
          for (const SeenProduct& p : g_seen) {
            EXPECT_EQ(p.a == DType::bf16 && p.w == DType::bf16, storage == Fp8Storage::automatic);
          }
          w.zero_grad();
          bias.zero_grad();
        }
      }
      ASSERT_EQ(seen[0].size(), seen[1].size());
      for (std::size_t i = 0; i < seen[0].size(); ++i) {
        ASSERT_EQ(seen[0][i].size(), seen[1][i].size());
        EXPECT_EQ(std::memcmp(seen[0][i].data(), seen[1][i].data(), seen[0][i].size() * sizeof(double)), 0) << "tensor " << i;
      }
    }
  }
  slot = g_real_scaled_matmul;
}

// BlockQuantize's `counts`: left in the caller's bytes (to be read later with a step's other values),
// they are the counts and amax it returns without them, on the CPU and the reference alike; what comes
// back is only the count and the tensor scale, and the values are the same.
// BlockQuantize's `factor` as the host reads it (8 bytes holding an f64).
double factor_in(const Tensor& factor) {
  double v;
  std::memcpy(&v, factor.to(Device::cpu()).data(), sizeof v);
  return v;
}

// Counts and the tensor scale left on the device for later (a step's one read; the product reads the
// factor where it lies) are what the quantizer returns when asked at once.
TEST(BlockQuantize, CountsLeftForLaterAreTheCountsItWouldReturn) {
  std::vector<double> v = Tensor::randn({64, 96}, DType::f32, 41, 0, 300).to_doubles();
  v[3] = std::numeric_limits<double>::infinity();
  v[70] = std::numeric_limits<double>::quiet_NaN();
  v[500] = 1e-30;
  v[900] = 1e6;
  const Tensor x = Tensor::from_values(v, {64, 96}, DType::f32);
  for (const char* name : {"e4m3 tensor f32 fit nearest", "e5m2 1x32 e8m0 fit nearest margin 1", "mxfp8", "nvfp4", "nvfp4-torchao", "mxfp4"}) {
    const QuantSpec spec = std::string(name).find(' ') == std::string::npos ? quant_spec(name) : QuantSpec::parse(name);
    for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
      SCOPED_TRACE(std::string(name) + (backend == CpuBackend::reference ? ", reference" : ", cpu"));
      const CpuBackendScope scope(backend);
      const Tensor now_out = Tensor::empty({64, 96}, DType::bf16), later_out = Tensor::empty({64, 96}, DType::bf16);
      const Fp8QuantizeStats now =
          detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, spec, 9, 0.0f, now_out, Tensor(), Tensor());
      const Tensor counts = Tensor::zeros({32}, DType::e4m3), factor = Tensor::full({8}, 3.0, DType::e4m3);
      const Fp8QuantizeStats back =
          detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, spec, 9, 0.0f, later_out, counts, factor);
      EXPECT_EQ(now.nonfinite, 2);
      if (!std::isnan(now.tensor_scale)) {
        EXPECT_GT(now.underflowed, 0);  // 1e-30 (NVFP4's scale is NaN with a NaN in x)
      }
      EXPECT_EQ(back.saturated + back.underflowed + back.nonfinite, 0);
      EXPECT_EQ(back.amax, 0);
      EXPECT_EQ(back.count, now.count);
      EXPECT_EQ(back.tensor_scale, 1.0);  // left in the factor
      const double left = factor_in(factor);
      EXPECT_TRUE(left == now.tensor_scale || (std::isnan(left) && std::isnan(now.tensor_scale))) << left << " " << now.tensor_scale;
      detail::Fp8Counts c;
      std::memcpy(&c, counts.data(), sizeof c);
      const Fp8QuantizeStats later = detail::stats_of(c, back.count);
      EXPECT_EQ(later.saturated, now.saturated);
      EXPECT_EQ(later.underflowed, now.underflowed);
      EXPECT_EQ(later.nonfinite, now.nonfinite);
      EXPECT_TRUE(later.amax == now.amax || (std::isnan(later.amax) && std::isnan(now.amax))) << now.amax << " " << later.amax;
      EXPECT_EQ(std::memcmp(now_out.data(), later_out.data(), 64 * 96 * 2), 0);
      EXPECT_THROW(detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, spec, 9, 0.0f, later_out,
                                                                      Tensor::zeros({16}, DType::e4m3), Tensor()),
                   std::invalid_argument);
      EXPECT_THROW(detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, spec, 9, 0.0f, later_out, Tensor(),
                                                                      Tensor::zeros({4}, DType::e4m3)),
                   std::invalid_argument);
    }
  }
  // A given (delayed) scale's factor is its inverse, as the returned tensor scale is.
  const QuantSpec per_tensor = QuantSpec::parse("e4m3 tensor f32 fit nearest");
  const Tensor out = Tensor::empty({64, 96}, DType::bf16), factor = Tensor::zeros({8}, DType::e4m3);
  const float given = 0.37f;
  const Fp8QuantizeStats now = detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, per_tensor, 0, given, out, Tensor(), Tensor());
  EXPECT_EQ(now.tensor_scale, 1.0 / static_cast<double>(given));
  (void)detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, per_tensor, 0, given, out, Tensor(), factor);
  EXPECT_EQ(factor_in(factor), now.tensor_scale);
}

// A per-tensor fit spec may write its values in the grid's own dtype (what the FP8 layer holds and an
// fp8 tensor core reads): the same values as in bf16, on the CPU and the reference alike, an infinity
// becoming e4m3's NaN (it has no infinity) and staying infinite in e5m2; the same counts. A spec whose
// values come scaled back (blocks), or another element's dtype, is refused.
TEST(BlockQuantize, PerTensorValuesGoInTheirGridsOwnDtypeAsInBf16) {
  std::vector<double> v = Tensor::randn({48, 80}, DType::f32, 43, 0, 200).to_doubles();
  v[5] = std::numeric_limits<double>::infinity();
  v[6] = -std::numeric_limits<double>::infinity();
  v[77] = std::numeric_limits<double>::quiet_NaN();
  v[300] = 1e-30;
  v[1000] = 1e7;
  const Tensor x = Tensor::from_values(v, {48, 80}, DType::f32);
  for (const char* name : {"e4m3 tensor f32 fit nearest", "e5m2 tensor f32 fit nearest", "e4m3 tensor f32 fit nearest margin 2"}) {
    const QuantSpec spec = QuantSpec::parse(name);
    const DType grid = *dtype_of(spec.element);
    for (const float given : {0.0f, 0.25f}) {
      for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
        SCOPED_TRACE(std::string(name) + " given " + std::to_string(given) + (backend == CpuBackend::reference ? ", reference" : ", cpu"));
        const CpuBackendScope scope(backend);
        const Tensor wide = Tensor::empty({48, 80}, DType::bf16), narrow = Tensor::empty({48, 80}, grid);
        const Fp8QuantizeStats a = detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, spec, 0, given, wide, Tensor(), Tensor());
        const Fp8QuantizeStats b = detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, spec, 0, given, narrow, Tensor(), Tensor());
        EXPECT_EQ(a.saturated, b.saturated);
        EXPECT_EQ(a.underflowed, b.underflowed);
        EXPECT_EQ(a.nonfinite, b.nonfinite);
        EXPECT_EQ(a.amax, b.amax);
        EXPECT_EQ(a.tensor_scale, b.tensor_scale);
        const std::vector<double> w = wide.to_doubles(), n = narrow.to_doubles();
        for (std::size_t i = 0; i < w.size(); ++i) {
          if (std::isinf(w[i]) && grid == DType::e4m3) {
            EXPECT_TRUE(std::isnan(n[i])) << i;
          } else if (std::isnan(w[i])) {
            EXPECT_TRUE(std::isnan(n[i])) << i;
          } else {
            ASSERT_EQ(n[i], w[i]) << i;
          }
        }
      }
    }
  }
  for (const auto& [name, out] : {std::pair{"e4m3 1x32 e8m0 fit nearest", DType::e4m3}, std::pair{"e4m3 tensor f32 fit nearest", DType::e5m2},
                                  std::pair{"mxfp8", DType::e4m3}, std::pair{"e4m3 tensor f32 fit nearest", DType::f16}}) {
    SCOPED_TRACE(std::string(name) + " into " + std::string(dtype_name(out)));
    const Tensor into = Tensor::empty({48, 80}, out);
    const QuantSpec spec = std::string(name).find(' ') == std::string::npos ? quant_spec(name) : QuantSpec::parse(name);
    EXPECT_THROW(detail::run_kernel<detail::kernel::BlockQuantize>(Device::cpu(), x, spec, 0, 0.0f, into, Tensor(), Tensor()),
                 std::invalid_argument);
  }
}

// A scaled product's factors on the operands' device multiply as its alpha does: alpha * a's * w's in
// f64, rounded to f32 once, so the same bits as the one alpha the host would have made of them.
TEST(ScaledMatmul, FactorsLeftOnTheDeviceMultiplyAsTheHostsAlpha) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  const std::int64_t m = 19, k = 64, n = 23;
  const Tensor a3 = reshape(grid_values({m, k}, seed), {1, m, k});
  const Tensor w3 = reshape(grid_values({k, n}, seed + 1), {1, k, n});
  const double fa = 1.0 / 3.3, fw = 1.0 / 0.0071;
  const auto factor = [](double v) {
    Tensor t = Tensor::empty({8}, DType::e4m3);
    std::memcpy(t.data(), &v, sizeof v);
    return t;
  };
  for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
    const CpuBackendScope scope(backend);
    Tensor by_factors = Tensor::empty({1, m, n}, DType::f32), by_alpha = Tensor::empty({1, m, n}, DType::f32);
    detail::run_kernel<detail::kernel::ScaledMatmul>(Device::cpu(), a3, w3, detail::ProductScale(0.5, factor(fa), factor(fw)),
                                                      Tensor(), by_factors);
    detail::run_kernel<detail::kernel::ScaledMatmul>(Device::cpu(), a3, w3, 0.5 * fa * fw, Tensor(), by_alpha);
    EXPECT_EQ(std::memcmp(by_factors.data(), by_alpha.data(), static_cast<std::size_t>(m * n) * 4), 0);
  }
}

}  // namespace
}  // namespace mantissa
