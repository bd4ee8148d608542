// Recipes as values: every FP8 recipe (delayed, current, block and the microscaled ones) is a QuantSpec per
// operand that one quantizer takes. The tests: a spec's words read back to the same value and bad words
// are refused naming them; a recipe whose operands are given another recipe's specs runs that recipe bit
// for bit (so nothing but the specs decides what a product sees); a plan file sets an operand's spec; and
// no op reaches the FP8 kernels but through the one quantizer (a source scan).
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/backend/registry.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/precision_plan.h"
#include "source_scan.h"
#include "test_support.h"

namespace mantissa {
namespace {

std::vector<QuantOptions> every_recipe() {
  std::vector<QuantOptions> out;
  for (const QuantRecipe r : QuantRecipe::all()) {  // every row of the table
    out.push_back({.recipe = r});
  }
  out.push_back({.recipe = QuantRecipe::current, .format = Fp8Format::e4m3, .margin = 2});
  out.push_back({.recipe = QuantRecipe::block, .margin = 1, .block = 64});
  out.push_back({.recipe = QuantRecipe::nvfp4, .nvfp4_sr = false, .nvfp4_2d_weights = false});
  out.push_back({.recipe = QuantRecipe::mxfp8, .mx_rule = ScaleRule::floor});
  return out;
}

TEST(QuantSpec, EveryRecipesSpecsReadBackFromTheirWords) {
  for (const QuantOptions& o : every_recipe()) {
    for (Fp8Operand operand : {Fp8Operand::input, Fp8Operand::weight, Fp8Operand::grad_output}) {
      const QuantSpec s = o.spec(operand);
      EXPECT_NO_THROW(s.check()) << s.str();
      EXPECT_EQ(QuantSpec::parse(s.str()), s) << o.str() << " " << fp8_operand_name(operand) << ": " << s.str();
    }
  }
  EXPECT_EQ(QuantOptions{}.spec(Fp8Operand::grad_output).str(), "e5m2 tensor f32 fit nearest");
  EXPECT_EQ((QuantOptions{.recipe = QuantRecipe::block, .margin = 1}.spec(Fp8Operand::weight).str()), "e4m3 128x128 e8m0 fit nearest margin 1");
  EXPECT_EQ(QuantSpec::parse("e2m1 16x16 e4m3*f32 stochastic"),
            (QuantSpec{.element = Format::e2m1(), .block_rows = 16, .block_cols = 16, .scale = ScaleFormat::e4m3,
                       .rounding = Rounding::stochastic}));
}

TEST(QuantSpec, WordsItCannotReadAreRefusedByName) {
  const auto refusal = [](const std::string& text) {
    try {
      (void)QuantSpec::parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"e4m3 1x32 e8m0 rceil", "no rounding"},
      {"e4m9 1x32 e8m0 rceil nearest", "e4m9 is not"},
      {"e4m3 1y32 e8m0 rceil nearest", "'1y32'"},
      {"e4m3 1x-3 e8m0 rceil nearest", "'1x-3'"},
      {"e4m3 1x32 e9m0 rceil nearest", "'e9m0'"},
      {"e4m3 1x32 e8m0 ceil nearest", "'ceil'"},
      {"e4m3 1x32 e8m0 rceil up", "'up'"},
      {"e4m3 1x32 e8m0 fit nearest margin x", "'x'"},
      {"e4m3 1x32 e8m0 fit nearest margin 31", "margin"},
      {"e4m3 1x32 e8m0 rceil nearest margin 1", "only the fit rule has a margin"},
      {"e4m3 tensor e8m0 fit nearest", "one per tensor"},
      {"e4m3 1x32 f32 fit nearest", "one per tensor"},
      {"e2m1 tensor f32 fit nearest", "FP8's"},
      {"e4m3 tensor f32 fit stochastic", "FP8's"},
      {"e4m3 1x0 e8m0 rceil nearest", "1 to 65536"},
      {"e4m3 1x32 e8m0 rceil nearest extra words", "margin"},
  };
  for (const auto& [text, want] : cases) {
    const std::string got = refusal(text);
    EXPECT_NE(got.find(want), std::string::npos) << text << " -> " << got;
    EXPECT_NE(got.find(text), std::string::npos) << got;  // the spec is named
  }
  // The definition quantizes the microscaled rules; the fit rule is the kernel's.
  EXPECT_THROW(quantize_blocks(std::vector<float>(4), 2, 2, QuantSpec::parse("e4m3 tensor f32 fit nearest")), std::invalid_argument);
}

// y, dx and dw of one fp8 linear layer under `o`, as bits, on inputs with an outlier.
std::vector<std::uint32_t> run_layer(const QuantOptions& o, std::uint64_t seed) {
  const std::int64_t m = 64, k = 96, n = 48;
  Tensor x = Tensor::randn({m, k}, DType::f32, seed, 0, 1);
  x.data_as<float>()[7 * k + 5] = 80;
  x.set_requires_grad();
  Tensor w = Tensor::randn({n, k}, DType::f32, seed + 1, 0, 0.05);
  w.set_requires_grad();
  const auto state = std::make_shared<QuantState>(o);
  Tensor y;
  {
    Autocast bf16(DType::bf16);
    y = fp8_linear(x, w, Tensor(), state);
  }
  y.backward(cast(Tensor::randn({m, n}, DType::f32, seed + 2, 0, 1e-3), DType::bf16));
  std::vector<std::uint32_t> bits;
  for (const Tensor& t : {y, x.grad(), w.grad()}) {
    for (const double v : cast(t, DType::f32).to_doubles()) bits.push_back(std::bit_cast<std::uint32_t>(static_cast<float>(v)));
  }
  return bits;
}

// A recipe given another recipe's specs for every operand runs that recipe, bit for bit: the specs are
// all a product's quantization depends on (but the delayed history and NVFP4's transform, which stay
// the recipe's own, so they are left out of the pairs or kept on both sides).
TEST(QuantSpec, ARecipeGivenAnothersSpecsRunsIt) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  const auto with_specs_of = [](QuantOptions host, const QuantOptions& donor) {
    for (std::size_t i = 0; i < kFp8Operands; ++i) host.specs[i] = donor.spec(static_cast<Fp8Operand>(i));
    return host;
  };
  const std::vector<std::pair<QuantOptions, QuantOptions>> pairs = {
      {{.recipe = QuantRecipe::current}, {.recipe = QuantRecipe::mxfp8}},
      {{.recipe = QuantRecipe::block, .margin = 1}, {.recipe = QuantRecipe::current}},
      {{.recipe = QuantRecipe::mxfp4}, {.recipe = QuantRecipe::block}},
      {{.recipe = QuantRecipe::nvfp4, .nvfp4_rht = false}, {.recipe = QuantRecipe::mxfp8}},
      {{.recipe = QuantRecipe::current, .format = Fp8Format::e4m3}, {.recipe = QuantRecipe::nvfp4, .nvfp4_rht = false}},
  };
  for (const auto& [recipe, host] : pairs) {
    const std::vector<std::uint32_t> want = run_layer(recipe, seed);
    const std::vector<std::uint32_t> got = run_layer(with_specs_of(host, recipe), seed);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << recipe.str() << " run as " << with_specs_of(host, recipe).str();
    // And the specs do change what runs: the host recipe alone gives other numbers.
    EXPECT_FALSE(run_layer(host, seed) == want) << host.str();
  }
}

TEST(QuantSpec, APlanFileSetsAnOperandsSpec) {
  const train::PrecisionPlan plan = train::PrecisionPlan::parse(
      R"({"low": "bf16", "fp8": {"recipe": "mxfp8", "grad_output": "e5m2 tensor f32 fit nearest"},
          "layers": {"fc0": "bf16", "fc1": {"level": "fp8", "recipe": {"recipe": "current", "weight": "e4m3 1x16 e8m0 rceil stochastic"}}, "fc2": "fp8"}})");
  EXPECT_EQ(plan.fp8.spec(Fp8Operand::grad_output).str(), "e5m2 tensor f32 fit nearest");
  EXPECT_EQ(plan.fp8.spec(Fp8Operand::input).str(), "e4m3 1x32 e8m0 rceil nearest");
  const QuantOptions& own = plan.recipe_of("fc1");
  EXPECT_EQ(own.spec(Fp8Operand::weight).rounding, Rounding::stochastic);
  EXPECT_TRUE(own.keeps_rounding_count());  // a stochastic spec keeps its count, so a resume goes on alike
  const std::string every = plan.str(true);
  EXPECT_NE(every.find("grad_output: e5m2 tensor f32 fit nearest"), std::string::npos) << every;
  EXPECT_NE(every.find("weight: e4m3 1x16 e8m0 rceil stochastic"), std::string::npos) << every;
  // What a checkpoint saves reads back to the same plan.
  const train::PrecisionPlan again = train::PrecisionPlan::parse(plan.json());
  EXPECT_EQ(again.fp8, plan.fp8);
  EXPECT_EQ(again.recipe_of("fc1"), own);
  EXPECT_EQ(again.json(), plan.json());
  // A bad spec names the layer's key and the word; a seed on a recipe with nothing stochastic is refused.
  const auto refusal = [](const std::string& json) {
    try {
      (void)train::PrecisionPlan::parse(json);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refusal(R"({"low": "bf16", "fp8": {"recipe": "current", "input": "e4m3 tensor f32 fit nearer"}, "layers": {"fc1": "fp8"}})").find("'nearer'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"low": "bf16", "fp8": {"recipe": "current", "seed": 3}, "layers": {"fc1": "fp8"}})").find("seed"), std::string::npos);
}

// Every op quantizes through kernel::BlockQuantize: the FP8 kernels it is built on are named only in
// the backends (and their benchmark), so no recipe can be a code path of its own again.
TEST(QuantSpec, NoOpReachesTheFp8KernelsButThroughTheOneQuantizer) {
  const std::set<std::string> backends = {
      "src/backend/kernels.h",           "src/backend/fit_quantize.h",          "src/backend/cpu/cpu_backend.cpp",
      "src/backend/cpu/cpu_kernels.h",   "src/backend/cpu/cpu_fp8.cpp",         "src/backend/reference/reference_backend.cpp",
      "src/backend/cuda/cuda_backend.cu", "src/backend/cuda/cuda_kernels.h",    "src/backend/cuda/cuda_fp8.cu",
      "src/backend/reference/reference_fp8.cpp", "src/backend/reference/reference_kernels.h", "bench/bench_kernels.cpp"};
  const testing::SourceScan scan = testing::scan_sources({"Fp8Quantize", "Fp8QuantizeCurrent", "Fp8Amax"}, false, backends);
  EXPECT_GT(scan.files, 100);
  for (const std::string& m : scan.matches) ADD_FAILURE() << m << " (quantize through kernel::BlockQuantize with a QuantSpec)";
}

// NVFP4's Hadamard transform as a kernel (so a GPU transforms where the values lie): on the cpu and the
// reference backends, the bits of hadamard16 on the values as f32, for bf16 and f32 inputs and a
// transposed view.
TEST(HadamardRows, TheKernelGivesTheDefinitionsBits) {
  MANTISSA_TRACE_SEED();
  for (const CpuBackend backend : {CpuBackend::onednn, CpuBackend::reference}) {
    CpuBackendScope scope(backend);
    for (const bool turned : {false, true}) {
      for (const DType dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (turned ? " transposed" : "") + (backend == CpuBackend::reference ? " reference" : ""));
        const Tensor x = turned ? transpose(Tensor::randn({40, 48}, dtype, testing::test_seed()), 0, 1)
                                : Tensor::randn({48, 40}, dtype, testing::test_seed());
        std::vector<float> want;
        for (const double v : x.to_doubles()) want.push_back(static_cast<float>(v));
        hadamard16(want, 48, 40, true, 0xb4e1);
        const Tensor out = Tensor::empty({48, 40}, DType::f32);
        detail::run_kernel<detail::kernel::HadamardRows>(Device::cpu(), x, std::uint16_t{0xb4e1}, out);
        ASSERT_EQ(std::memcmp(out.data(), want.data(), want.size() * sizeof(float)), 0);
      }
    }
  }
}

}  // namespace
}  // namespace mantissa
