// The GPU kernels the op parity table does not reach, against the CPU's (themselves tested against the
// reference): the numerics telemetry gives the same counts and histogram, the FP8 quantizer the same
// scales, bits and counters (the block quantizer too, every rule), and the scaled product the same values up to the order of f32 additions.
// On values spread over every exponent, with zeros, infinities and NaNs, contiguous and transposed.
// Cross-entropy's packed kernels: the backward's losses are the forward's bits.
// And cuDNN's fused attention against the composition, the ids' way to the GPU, and the GPU's own clock of the step breakdown. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mantissa/backend/cuda.h"
#include "mantissa/backend/kernel_timer.h"
#include "mantissa/core/batched_reads.h"
#include "mantissa/core/storage.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/ops/ops.h"
#include "../../src/backend/fused_attention.h"
#include "../../src/backend/registry.h"
#include "gpu_test.h"

namespace mantissa::detail {
namespace {

const Device kGpu{DeviceType::cuda, 0};

class CudaKernels : public testing::GpuTest {};

// [rows, cols] values m 2^e with e spread over [-40, 20], some zeros, infinities and NaNs, in `dtype`.
Tensor spread(std::int64_t rows, std::int64_t cols, DType dtype, std::uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-40, 20), pick(0, 99);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (float& x : v) {
    x = std::ldexp(mantissa(rng), exponent(rng));
    const int p = pick(rng);
    if (p < 3) x = 0;
    if (specials && p == 3) x = std::numeric_limits<float>::infinity();
    if (specials && p == 4) x = -std::numeric_limits<float>::infinity();
    if (specials && p == 5) x = std::numeric_limits<float>::quiet_NaN();
  }
  Tensor t = Tensor::empty({rows, cols}, DType::f32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return dtype == DType::f32 ? t : cast(t, dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = contiguous_copy(a.to(Device::cpu())), y = contiguous_copy(b.to(Device::cpu()));
  return x.numel() == y.numel() &&
         std::memcmp(x.data(), y.data(), static_cast<std::size_t>(x.numel()) * dtype_size(x.dtype())) == 0;
}

TEST_F(CudaKernels, NumericsCountsWhatTheCpuCounts) {
  const std::vector<double> limits{1.0, 448.0, 57344.0, 1e-6};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor x = spread(300, 129, dtype, 7, true);
    for (const bool transposed : {false, true}) {
      const Tensor cpu = transposed ? transpose(x, 0, 1) : x;
      const Tensor gpu_base = x.to(kGpu);
      const Tensor gpu = transposed ? transpose(gpu_base, 0, 1) : gpu_base;
      const NumericsStats a = run_kernel<kernel::Numerics>(Device::cpu(), cpu, 0.125, std::span<const double>(limits));
      const NumericsStats b = run_kernel<kernel::Numerics>(kGpu, gpu, 0.125, std::span<const double>(limits));
      EXPECT_EQ(b.count, a.count);
      EXPECT_EQ(b.zeros, a.zeros);
      EXPECT_EQ(b.nonfinite, a.nonfinite);
      EXPECT_EQ(b.amax, a.amax);
      EXPECT_EQ(b.log2, a.log2) << dtype_name(dtype);
      EXPECT_EQ(b.above, a.above);
    }
  }
}

TEST_F(CudaKernels, Fp8QuantizationGivesTheCpusScalesBitsAndCounters) {
  for (const Format format : {Format::e4m3(), Format::e5m2()}) {
    for (const bool power_of_2 : {false, true}) {
      for (const bool dequantize : {false, true}) {
        const Tensor x = spread(100, 70, DType::bf16, 11, false);
        const Shape blocks{4, 3};  // 32 x 32 blocks, the last ones short
        Tensor scales_cpu = Tensor::empty(blocks, DType::f32), out_cpu = Tensor::empty({100, 70}, DType::bf16);
        Tensor scales_gpu = Tensor::empty(blocks, DType::f32, kGpu), out_gpu = Tensor::empty({100, 70}, DType::bf16, kGpu);
        const Fp8QuantizeStats a = run_kernel<kernel::Fp8QuantizeCurrent>(Device::cpu(), x, format, 32, 32, 0, power_of_2,
                                                                          dequantize, scales_cpu, out_cpu);
        const Fp8QuantizeStats b = run_kernel<kernel::Fp8QuantizeCurrent>(kGpu, x.to(kGpu), format, 32, 32, 0, power_of_2,
                                                                          dequantize, scales_gpu, out_gpu);
        EXPECT_TRUE(same_bytes(scales_gpu, scales_cpu));
        EXPECT_TRUE(same_bytes(out_gpu, out_cpu)) << "power of 2 " << power_of_2 << ", dequantize " << dequantize;
        EXPECT_EQ(b.amax, a.amax);
        EXPECT_EQ(b.count, a.count);
        EXPECT_EQ(b.underflowed, a.underflowed);
        EXPECT_EQ(b.nonfinite, a.nonfinite);
        // Delayed scaling's fixed scale, too small for the block's values: saturation counted alike.
        const Tensor tight = Tensor::full(blocks, 1e3, DType::f32);
        const Fp8QuantizeStats c = run_kernel<kernel::Fp8Quantize>(Device::cpu(), x, format, tight, 32, 32, dequantize, out_cpu);
        const Fp8QuantizeStats d =
            run_kernel<kernel::Fp8Quantize>(kGpu, x.to(kGpu), format, tight.to(kGpu), 32, 32, dequantize, out_gpu);
        EXPECT_GT(c.saturated, 0);
        EXPECT_EQ(d.saturated, c.saturated);
        EXPECT_TRUE(same_bytes(out_gpu, out_cpu));
      }
    }
  }
}

// The one quantizer, every rule: FP8's fit rule (per tensor and 1 x 32 power-of-2 blocks) and the
// microscaled presets (E8M0 floor / even / rceil, NVFP4's E4M3 scales by torchao's and TE's rules with 16 x 16
// blocks and stochastic rounding, MXFP6's elements), values with specials, f32 and a transposed bf16 view: the same bits, counts and scales.
TEST_F(CudaKernels, TheBlockQuantizerGivesTheCpusBitsForEveryRule) {
  std::vector<QuantSpec> specs = {QuantSpec::parse("e4m3 tensor f32 fit nearest"), QuantSpec::parse("e5m2 1x32 e8m0 fit nearest margin 1"),
                                  quant_spec("mxfp8"), quant_spec("mxfp8-rceil"), quant_spec("mxfp4"), quant_spec("nvfp4"),
                                  QuantSpec::parse("e4m3 1x32 e8m0 even nearest"), QuantSpec::parse("e2m1 16x16 e4m3*f32 stochastic"),
                                  QuantSpec::parse("e2m1 1x16 e4m3*f32 te nearest"), QuantSpec::parse("e2m1 16x16 e4m3*f32 te stochastic"),
                                  QuantSpec::parse("e2m3 1x32 e8m0 rceil nearest"), QuantSpec::parse("e3m2 1x32 e8m0 floor stochastic")};
  for (const QuantSpec& spec : specs) {
    for (const bool specials : {false, true}) {
      for (const bool turned : {false, true}) {
        SCOPED_TRACE(spec.str() + (specials ? ", specials" : "") + (turned ? ", transposed bf16" : ""));
        const Tensor x = turned ? transpose(spread(80, 96, DType::bf16, 13, specials), 0, 1) : spread(96, 80, DType::f32, 12, specials);
        Tensor out_cpu = Tensor::empty({96, 80}, DType::bf16), out_gpu = Tensor::empty({96, 80}, DType::bf16, kGpu);
        const Fp8QuantizeStats a = run_kernel<kernel::BlockQuantize>(Device::cpu(), x, spec, 77, 0.0f, out_cpu, Tensor(), Tensor());
        // The counts read back at once, and left on the GPU to be read later (a step's batched reads).
        for (const bool left : {false, true}) {
          SCOPED_TRACE(left ? "counts left on the GPU" : "counts read back");
          BatchedReads reads(kGpu);
          Fp8Counts later;
          const Tensor counts = left ? reads.slot(sizeof later, [&](std::span<const std::byte> bytes) {
            std::memcpy(&later, bytes.data(), sizeof later);
          })
                                     : Tensor();
          // Left: the tensor scale too, in a factor on the GPU (the product reads it there).
          const Tensor factor = left ? Tensor::zeros({8}, DType::e4m3, kGpu) : Tensor();
          const Tensor x_gpu = x.to(kGpu);
          const HostDeviceTraffic before = host_device_traffic();
          Fp8QuantizeStats b = run_kernel<kernel::BlockQuantize>(kGpu, x_gpu, spec, 77, 0.0f, out_gpu, counts, factor);
          if (left) {
            EXPECT_EQ(host_device_traffic().waits, before.waits);
            EXPECT_EQ(b.saturated + b.underflowed + b.nonfinite, 0);  // only the count comes back
            EXPECT_EQ(b.tensor_scale, 1.0);
            reads.read();
            b = stats_of(later, b.count);
            std::memcpy(&b.tensor_scale, factor.to(Device::cpu()).data(), sizeof b.tensor_scale);
          }
          EXPECT_TRUE(same_bytes(out_gpu, out_cpu));
          EXPECT_EQ(b.saturated, a.saturated);
          EXPECT_EQ(b.underflowed, a.underflowed);
          EXPECT_EQ(b.nonfinite, a.nonfinite);
          EXPECT_EQ(b.count, a.count);
          EXPECT_TRUE(b.amax == a.amax || (std::isnan(b.amax) && std::isnan(a.amax))) << a.amax << " " << b.amax;
          EXPECT_TRUE(b.tensor_scale == a.tensor_scale || (std::isnan(b.tensor_scale) && std::isnan(a.tensor_scale)));
        }
      }
    }
  }
}

// NVFP4's Hadamard transform on the GPU, where the values lie: the CPU's bits (the same additions).
TEST_F(CudaKernels, TheHadamardTransformGivesTheCpusBits) {
  for (const bool turned : {false, true}) {
    const Tensor x = turned ? transpose(Tensor::randn({80, 96}, DType::bf16, 31), 0, 1) : Tensor::randn({96, 80}, DType::f32, 32);
    Tensor out_cpu = Tensor::empty({96, 80}, DType::f32), out_gpu = Tensor::empty({96, 80}, DType::f32, kGpu);
    run_kernel<kernel::HadamardRows>(Device::cpu(), x, std::uint16_t{0xb4e1}, out_cpu);
    run_kernel<kernel::HadamardRows>(kGpu, x.to(kGpu), std::uint16_t{0xb4e1}, out_gpu);
    EXPECT_TRUE(same_bytes(out_gpu, out_cpu)) << (turned ? "transposed bf16" : "f32");
  }
}

TEST_F(CudaKernels, TheScaledProductFollowsTheCpus) {
  const Tensor a = fp8_round_trip(reshape(Tensor::randn({2, 37, 64}, DType::f32, 3), {74, 64}), Format::e4m3(), 1, 64, true);
  const Tensor w = fp8_round_trip(Tensor::randn({64, 48}, DType::f32, 4), Format::e4m3(), 64, 1, true);
  const Tensor a3 = cast(reshape(a, {2, 37, 64}), DType::bf16);
  const Tensor w3 = cast(reshape(w, {1, 64, 48}), DType::bf16);
  const Tensor wb = make_view(w3, {2, 64, 48}, {0, 48, 1}, 0);  // the same weights for both batches
  const Tensor bias = Tensor::randn({48}, DType::f32, 5);
  Tensor out_cpu = Tensor::empty({2, 37, 48}, DType::f32), out_gpu = Tensor::empty({2, 37, 48}, DType::f32, kGpu);
  run_kernel<kernel::ScaledMatmul>(Device::cpu(), a3, wb, 0.37, bias, out_cpu);
  const Tensor w_gpu = w3.to(kGpu);
  run_kernel<kernel::ScaledMatmul>(kGpu, a3.to(kGpu), make_view(w_gpu, {2, 64, 48}, {0, 48, 1}, 0), 0.37, bias.to(kGpu),
                                   out_gpu);
  const std::vector<double> x = out_cpu.to_doubles(), y = out_gpu.to(Device::cpu()).to_doubles();
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5 * (std::fabs(x[i]) + 1)) << i;
}

// On the GPU too, a layer norm made for a product (an f32 input, a bf16 or f16 output) has the bits of
// the f32 layer norm cast, forward and backward (x, gamma, beta): the packed forward and one-pass
// backward (768 columns), the block forward and warp backward (100).
TEST_F(CudaKernels, ALayerNormMadeForAProductIsTheCastOfItsF32Output) {
  for (const DType out : {DType::bf16, DType::f16}) {
    for (const std::int64_t cols : {768, 100}) {
      SCOPED_TRACE(std::string(dtype_name(out)) + ", " + std::to_string(cols) + " columns");
      const Tensor x = Tensor::randn({300, cols}, DType::f32, 31, 3.0, 2.0).to(kGpu).set_requires_grad();
      const Tensor gamma = Tensor::randn({cols}, DType::f32, 32, 1.0, 0.3).to(kGpu).set_requires_grad();
      const Tensor beta = Tensor::randn({cols}, DType::f32, 33, 0.0, 0.3).to(kGpu).set_requires_grad();
      const Tensor g = Tensor::randn({300, cols}, out, 34).to(kGpu);
      const auto run = [&](bool fused) {
        const Tensor y = fused ? layer_norm(x, gamma, beta, 1e-5, out) : cast(layer_norm(x, gamma, beta, 1e-5), out);
        for (const Tensor* t : {&x, &gamma, &beta}) t->zero_grad();
        y.backward(g);
        return std::vector<Tensor>{y, x.grad(), gamma.grad(), beta.grad()};
      };
      const std::vector<Tensor> fused = run(true), composed = run(false);
      for (std::size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(same_bytes(fused[i], composed[i])) << "output, x, gamma, beta: " << i;
    }
  }
}

// On the GPU a residual added in the norm's own pass (add_layer_norm: the packed kernel with the add
// inside) gives the add's and the norm's bits, forward and backward: an f32 stream with a bf16 branch and
// output (a GPT block's under autocast) and one dtype throughout, 768 columns (packed) and 100 (the two
// kernels).
TEST_F(CudaKernels, AResidualAddedInTheNormsPassIsTheAddThenTheNorm) {
  for (const auto& [stream, branch] : {std::pair{DType::f32, DType::bf16}, std::pair{DType::bf16, DType::bf16}}) {
    for (const std::int64_t cols : {768, 100}) {
      SCOPED_TRACE(std::string(dtype_name(stream)) + " + " + std::string(dtype_name(branch)) + ", " + std::to_string(cols));
      const Tensor x = Tensor::randn({300, cols}, stream, 41, 3.0, 2.0).to(kGpu).set_requires_grad();
      const Tensor r = Tensor::randn({300, cols}, branch, 42).to(kGpu).set_requires_grad();
      const Tensor gamma = Tensor::randn({cols}, DType::f32, 43, 1.0, 0.3).to(kGpu).set_requires_grad();
      const Tensor beta = Tensor::randn({cols}, DType::f32, 44, 0.0, 0.3).to(kGpu).set_requires_grad();
      const Tensor gs = Tensor::randn({300, cols}, stream, 45).to(kGpu), gy = Tensor::randn({300, cols}, branch, 46).to(kGpu);
      const auto run = [&](bool fused) {
        Tensor sum, y;
        if (fused) {
          std::tie(sum, y) = add_layer_norm(x, r, gamma, beta, 1e-5, branch);
        } else {
          sum = add(x, r);
          y = layer_norm(sum, gamma, beta, 1e-5, branch);
        }
        for (const Tensor* t : {&x, &r, &gamma, &beta}) t->zero_grad();
        add(mul(sum, gs), cast(mul(y, gy), sum.dtype())).backward(Tensor::full(sum.shape(), 1, sum.dtype(), kGpu));
        return std::vector<Tensor>{sum, y, x.grad(), r.grad(), gamma.grad(), beta.grad()};
      };
      const std::vector<Tensor> fused = run(true), composed = run(false);
      for (std::size_t i = 0; i < fused.size(); ++i) {
        EXPECT_TRUE(same_bytes(fused[i], composed[i])) << "sum, norm, x, r, gamma, beta: " << i;
      }
    }
  }
}

// A scaled product whose factors the quantizers left on the GPU (current scaling, NVFP4) multiplies by
// them there, on fp8 tensor cores (as the scale of cuBLASLt's A) and on the bf16 path (alpha by device
// pointer), a shape of each kind: the bits of the product given alpha * a's * w's from the host, and
// no wait for the host.
TEST_F(CudaKernels, FactorsOnTheGpuScaleAProductAsTheHostsAlpha) {
  const double fa = 1.0 / 3.3, fw = 1.0 / 0.0071;
  const auto factor = [](double v) {
    Tensor t = Tensor::empty({8}, DType::e4m3);
    std::memcpy(t.data(), &v, sizeof v);
    return t.to(kGpu);
  };
  const Tensor a_factor = factor(fa), w_factor = factor(fw);
  for (const std::int64_t m : {96, 37}) {  // 37 rows: no fp8 kernel, the bf16 path
    for (const bool fp8_cores : {true, false}) {
      SCOPED_TRACE(std::to_string(m) + (fp8_cores ? " rows, fp8 tensor cores allowed" : " rows, bf16 path"));
      set_cuda_fp8_tensor_cores(fp8_cores);
      const std::int64_t k = 128, n = 80;
      const Tensor a = cast(Tensor::randn({1, m, k}, DType::f32, 17, 0, 4), DType::e4m3).to(kGpu);
      const Tensor w = cast(Tensor::randn({1, k, n}, DType::f32, 18, 0, 4), DType::e4m3).to(kGpu);
      const Tensor bias = Tensor::randn({n}, DType::bf16, 19).to(kGpu);
      const Tensor by_factors = Tensor::empty({1, m, n}, DType::bf16, kGpu), by_alpha = Tensor::empty({1, m, n}, DType::bf16, kGpu);
      const HostDeviceTraffic before = host_device_traffic();
      run_kernel<kernel::ScaledMatmul>(kGpu, a, w, ProductScale(0.5, a_factor, w_factor), bias, by_factors);
      EXPECT_EQ(host_device_traffic().waits, before.waits);
      run_kernel<kernel::ScaledMatmul>(kGpu, a, w, 0.5 * fa * fw, bias, by_alpha);
      EXPECT_TRUE(same_bytes(by_factors, by_alpha));
    }
  }
  set_cuda_fp8_tensor_cores(true);
}

// Cross-entropy on rows the packed kernels take (columns a multiple of 8; the backward keeps a row in
// shared memory up to 110 KiB: not the f32 row of 28168 columns): the losses the backward makes from the
// same read as the gradient it writes over the logits are the forward's, bit for bit (training's losses
// and evaluation's agree); the gradient written in place is the separate one's; the losses are the
// CPU's up to the order of f32 additions.
TEST_F(CudaKernels, PackedCrossEntropyBackwardsLossesAreTheForwardsBits) {
  const std::vector<std::pair<DType, std::int64_t>> shapes = {
      {DType::bf16, 4104}, {DType::f16, 1032}, {DType::f32, 4104}, {DType::f32, 28168}};
  for (const auto& [dtype, cols] : shapes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " x " + std::to_string(cols));
    const std::int64_t n = 6;
    const std::vector<std::int64_t> targets = {1, -100, cols - 1, 7, 0, cols / 2};
    const Tensor logits_cpu = Tensor::randn({n, cols}, dtype, 41, 0.0, 3.0);
    const Tensor g_cpu = Tensor::uniform({n}, DType::f32, 42, -1, 1);
    const Tensor logits = logits_cpu.to(kGpu), g = g_cpu.to(kGpu);
    const Tensor separate = Tensor::empty({n, cols}, dtype, kGpu), in_place = logits_cpu.to(kGpu);
    const Tensor losses = Tensor::full({n}, 7.0, DType::f32, kGpu), forward = Tensor::empty({n}, DType::f32, kGpu);
    run_kernel<kernel::CrossEntropyBackward>(kGpu, logits, targets, -100, 0.1, g, separate, Tensor());
    run_kernel<kernel::CrossEntropyBackward>(kGpu, in_place, targets, -100, 0.1, g, in_place, losses);
    run_kernel<kernel::CrossEntropy>(kGpu, logits, targets, -100, 0.1, forward);
    EXPECT_TRUE(same_bytes(in_place, separate));
    EXPECT_TRUE(same_bytes(losses, forward));
    const Tensor cpu = Tensor::empty({n}, DType::f32);
    run_kernel<kernel::CrossEntropy>(Device::cpu(), logits_cpu, targets, -100, 0.1, cpu);
    const std::vector<double> want = cpu.to_doubles(), got = losses.to(Device::cpu()).to_doubles();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (std::fabs(want[i]) + 1)) << i;
    EXPECT_EQ(got[1], 0.0) << "the ignored row";
  }
}

// Operands held in fp8 dtypes (e4m3 x e4m3, e5m2 gradients x e4m3) run on fp8 tensor cores where the
// GPU has them (capability 8.9+): the same numbers as the CPU's bf16 product up to f32 accumulation,
// with the bias by the epilogue (bf16 output) or after the product (f32 output), the weight seen
// transposed as the forward product uses it (no copy) and stored as the backward's does (a byte copy).
// cuda_fp8_products() says which path ran: fp8 tensor cores where allowed and present, else the bf16
// product of the widened operands, and bf16 operands always the bf16 path.
TEST_F(CudaKernels, ScaledProductsOnFp8GridsRunOnFp8TensorCores) {
  const std::int64_t m = 96, k = 128, n = 80;
  for (const auto& [ga, gw] : {std::pair{DType::e4m3, DType::e4m3}, std::pair{DType::e5m2, DType::e4m3}}) {
    // Values on the grids, held in the fp8 dtypes.
    const Tensor a = cast(Tensor::randn({m, k}, DType::f32, 7, 0, 4), ga);
    const Tensor wt = cast(Tensor::randn({n, k}, DType::f32, 8, 0, 4), gw);  // used as [k, n]
    const Tensor bias = Tensor::randn({n}, DType::f32, 9);
    const Tensor a3 = reshape(a, {1, m, k});
    const Tensor w_stored = cast(contiguous(transpose(cast(wt, DType::f32), 0, 1)), gw);  // [k, n] stored: the backward's layout
    for (const auto& [od, stored] : {std::pair{DType::bf16, false}, std::pair{DType::f32, false}, std::pair{DType::bf16, true}}) {
      SCOPED_TRACE(std::string(dtype_name(ga)) + " x " + std::string(dtype_name(gw)) + " -> " + std::string(dtype_name(od)) +
                   (stored ? ", w stored [k, n]" : ""));
      Tensor out_cpu = Tensor::empty({1, m, n}, od), out_gpu = Tensor::empty({1, m, n}, od, kGpu);
      const auto w_view = [&](const Tensor& t) {
        return stored ? reshape(t, {1, k, n}) : make_view(t, {1, k, n}, {k * n, 1, k}, 0);
      };
      run_kernel<kernel::ScaledMatmul>(Device::cpu(), a3, w_view(stored ? w_stored : wt), 0.01, bias, out_cpu);
      const Tensor w_gpu = (stored ? w_stored : wt).to(kGpu);
      run_kernel<kernel::ScaledMatmul>(kGpu, a3.to(kGpu), w_view(w_gpu), 0.01, bias.to(kGpu), out_gpu);
      const std::vector<double> x = out_cpu.to_doubles(), y = out_gpu.to(Device::cpu()).to_doubles();
      // Hopper's fp8 tensor cores add products with an accumulator of about 14 bits between cuBLASLt's
      // promotions to f32 (DeepSeek-V3's report, 3.3.2; the first H200 run here: 2^-12.6 of the sums'
      // magnitudes): the bound is in units of 0.01 sum_k |a_ik| |w_kj|, plus the output's rounding.
      const std::vector<double> av = a.to_doubles(), wv = wt.to_doubles();
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double magnitude = 0;
          for (std::int64_t q = 0; q < k; ++q) magnitude += std::fabs(av[i * k + q] * wv[j * k + q]);
          const std::size_t o = static_cast<std::size_t>(i * n + j);
          // One ulp of the output: sums a little apart can round to neighbours.
          const double rounding = od == DType::bf16 ? 0x1p-7 * std::fabs(x[o]) : 0x1p-23 * std::fabs(x[o]);
          ASSERT_NEAR(y[o], x[o], 0x1p-11 * 0.01 * magnitude + rounding + 1e-6) << i << ", " << j;
        }
      }
    }
  }
  const CudaInfo info = cuda_info();
  const bool has_fp8 = info.devices[0].major > 8 || (info.devices[0].major == 8 && info.devices[0].minor >= 9);
  const Tensor a8 = Tensor::full({1, m, k}, 1.0, DType::e4m3, kGpu), w8 = Tensor::full({1, k, n}, 1.0, DType::e4m3, kGpu);
  const Tensor a16 = Tensor::full({1, m, k}, 1.0, DType::bf16, kGpu), w16 = Tensor::full({1, k, n}, 1.0, DType::bf16, kGpu);
  for (const bool allowed : {true, false}) {
    set_cuda_fp8_tensor_cores(allowed);
    for (const bool fp8_held : {true, false}) {
      const Tensor out = Tensor::empty({1, m, n}, DType::f32, kGpu);
      const std::int64_t before = cuda_fp8_products();
      run_kernel<kernel::ScaledMatmul>(kGpu, fp8_held ? a8 : a16, fp8_held ? w8 : w16, 1.0, Tensor(), out);
      EXPECT_EQ(out.to(Device::cpu()).to_doubles()[0], 128.0);
      EXPECT_EQ(cuda_fp8_products() - before, allowed && has_fp8 && fp8_held ? 1 : 0)
          << (allowed ? "allowed, " : "off, ") << (fp8_held ? "fp8 operands" : "bf16 operands");
    }
  }
  set_cuda_fp8_tensor_cores(true);
}

// Ids go to the GPU through a ring of 32 pinned slots without the host waiting: 200 lookups queued at
// once, each from a host vector gone before the GPU runs it, still pick the rows their ids named (the
// slots are reused only once their copy has run).
TEST_F(CudaKernels, IndicesReachTheGpuIntactWhenManyCopiesAreQueued) {
  const Tensor weight_cpu = Tensor::uniform({64, 8}, DType::f32, 5, -1, 1);
  const Tensor weight = weight_cpu.to(kGpu);
  std::mt19937 rng(7);
  std::vector<std::vector<std::int64_t>> all_ids;
  std::vector<Tensor> rows;
  for (int i = 0; i < 200; ++i) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(1 + i % 37));
    for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 64);
    rows.push_back(embedding(weight, ids, {static_cast<std::int64_t>(ids.size())}));
    all_ids.push_back(ids);  // a copy: the vector the op read is gone before the GPU runs
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Tensor want = embedding(weight_cpu, all_ids[i], {static_cast<std::int64_t>(all_ids[i].size())});
    ASSERT_TRUE(same_bytes(rows[i], want)) << "lookup " << i;
  }
}

// cuDNN's fused attention (through mantissa's plugin) against the composition of products and the
// attention softmax on the GPU, itself checked against the reference by the parity table: the output
// and q's, k's and v's gradients, causal and not, bf16 and fp16, a small shape and GPT-2's (T = 1024,
// 12 heads of 64). Skipped, with the reason, where the plugin or cuDNN is not there.
TEST_F(CudaKernels, FusedAttentionFollowsTheComposition) {
  const FusedAttention* fused = fused_attention(DeviceType::cuda);
  ASSERT_NE(fused, nullptr);
  const std::string status = cuda_info().fused_attention;
  if (status.rfind("not available", 0) == 0) GTEST_SKIP() << status;
  struct Case {
    std::int64_t batch, t, heads, d;
  };
  for (const Case& c : {Case{2, 128, 4, 64}, Case{1, 1024, 12, 64}}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      for (const bool causal : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (causal ? " causal" : " full") + " T=" + std::to_string(c.t));
        const Tensor qkv0 = cast(Tensor::uniform({c.batch, c.t, 3 * c.heads * c.d}, DType::f32, 3, -1, 1).to(kGpu), dtype);
        const Tensor g = cast(Tensor::uniform({c.batch, c.t, c.heads * c.d}, DType::f32, 4, -1, 1).to(kGpu), dtype);
        std::string why;
        ASSERT_TRUE(fused->supports(qkv0, c.heads, causal, 1 / std::sqrt(static_cast<double>(c.d)), why)) << why;
        const auto run = [&](bool allow) {
          set_cuda_fused_attention(allow);
          Tensor qkv = qkv0.detach();
          qkv.set_requires_grad();
          const Tensor out = self_attention(qkv, c.heads, causal);
          out.backward(g);
          set_cuda_fused_attention(true);
          return std::pair{out.to(Device::cpu()).to_doubles(), qkv.grad().to(Device::cpu()).to_doubles()};
        };
        const auto [out, grad] = run(true);
        const auto [out_ref, grad_ref] = run(false);
        // Both round the probabilities to the inputs' dtype before their product with v, in another order:
        // a few of its ulps of the largest value apart.
        const double ulp = dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
        for (const auto& [got, want, what] : {std::tuple{&out, &out_ref, "output"}, std::tuple{&grad, &grad_ref, "gradient"}}) {
          double largest = 0, worst = 0;
          for (std::size_t i = 0; i < want->size(); ++i) {
            largest = std::max(largest, std::fabs((*want)[i]));
            worst = std::max(worst, std::fabs((*got)[i] - (*want)[i]));
          }
          EXPECT_GT(largest, 0.01) << what;
          EXPECT_LE(worst, 8 * ulp * largest) << what;
        }
      }
    }
  }
}

// The GPU's clock: with device kernel timing on, the products' time on the GPU is counted under
// "matmul", at most the wall time around them (the host waited for all of it), and nothing after.
TEST_F(CudaKernels, TheGpuClockTimesKernelsOnTheDevice) {
  const Tensor a = cast(Tensor::uniform({2048, 2048}, DType::f32, 1, -1, 1).to(kGpu), DType::bf16);
  (void)matmul(a, a);
  cuda_synchronize();
  reset_kernel_times();
  set_device_kernel_timing(true);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) (void)matmul(a, a);
  cuda_synchronize();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  set_device_kernel_timing(false);
  const std::map<std::string, double> gpu = device_kernel_seconds();
  ASSERT_EQ(gpu.count("matmul"), 1u);
  EXPECT_GT(gpu.at("matmul"), 0.0);
  EXPECT_LE(gpu.at("matmul"), wall);
  (void)matmul(a, a);
  EXPECT_TRUE(device_kernel_seconds().empty());
}

}  // namespace
}  // namespace mantissa::detail
