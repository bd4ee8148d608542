// The CUDA backend where a GPU is present (every case is skipped, with the reason, where there is none;
// scripts/gpu-check.sh runs them on the device machine): casts give the CPU's bits on every 16-bit
// pattern and on 10^6 random f32 values, for bf16, fp16, e4m3 and e5m2, nearest and stochastic; the
// caching allocator reuses memory and says clearly when the GPU is full; the optimizer and the loss
// scaler's check give the CPU's results; a tensor on the wrong device is a one-line error; a small GPT
// trains on the GPU along the CPU's loss curve, and its checkpoints move between the devices; so does
// the CNN (cuDNN's convolutions, batch norm and pooling).
#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <filesystem>

#include "mantissa/autograd/node.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/core/batched_reads.h"
#include "mantissa/core/memory.h"
#include "mantissa/core/tensor.h"
#include "mantissa/data/datasets.h"
#include "mantissa/nn/models.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/ops/ops.h"
#include "mantissa/optim/optimizer.h"
#include "mantissa/train/trainer.h"
#include "../../src/backend/registry.h"
#include "gpu_test.h"

namespace mantissa {
namespace {

const Device kGpu{DeviceType::cuda, 0};

class Cuda : public testing::GpuTest {};

// f32 values from raw bit patterns.
Tensor f32_from_bits(const std::vector<std::uint32_t>& bits) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(bits.size())}, DType::f32);
  std::memcpy(t.data(), bits.data(), bits.size() * 4);
  return t;
}

std::vector<std::uint32_t> cast_inputs() {
  std::vector<std::uint32_t> bits;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    bits.push_back(p << 16);                 // every bf16 value, and the f32 values around every fp16 and fp8 one
    bits.push_back(p << 16 | 0x8000);        // ties for bf16
    bits.push_back(p << 16 | (p * 2654435761U >> 16));  // an arbitrary low half
  }
  std::mt19937 rng(20261201);
  for (int i = 0; i < 1000000; ++i) bits.push_back(static_cast<std::uint32_t>(rng()));  // every exponent, NaNs and infinities included
  return bits;
}

void expect_same_bytes(const Tensor& gpu_result, const Tensor& cpu_result, const std::string& what) {
  const Tensor back = gpu_result.to(Device::cpu());
  const std::size_t n = static_cast<std::size_t>(back.numel()) * dtype_size(back.dtype());
  ASSERT_EQ(back.numel(), cpu_result.numel());
  const auto* a = static_cast<const unsigned char*>(back.data());
  const auto* b = static_cast<const unsigned char*>(cpu_result.data());
  const std::size_t size = dtype_size(back.dtype());
  for (std::size_t i = 0; i < n; i += size) {
    ASSERT_EQ(0, std::memcmp(a + i, b + i, size)) << what << ": element " << i / size << " differs";
  }
}

// The same values, NaN where the CPU has NaN (whatever its payload), and a subnormal f32 result where
// the CPU may have 0 (its vector kernels can flush them: the second GPU run saw abs of a bf16
// subnormal give 0 on the CPU).
void expect_same_values(const Tensor& gpu_result, const Tensor& cpu_result, const std::string& what) {
  const std::vector<double> a = gpu_result.to_doubles(), b = cpu_result.to_doubles();
  ASSERT_EQ(a.size(), b.size());
  const auto flushed = [](double v) { return std::fabs(v) < 0x1p-126 ? 0.0 : v; };
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(flushed(a[i]) == flushed(b[i]) || (std::isnan(a[i]) && std::isnan(b[i])))
        << what << ": element " << i << ": " << a[i] << " " << b[i];
  }
}

TEST_F(Cuda, CastsGiveTheCpusBitsOnEveryPatternAndAMillionRandomValues) {
  const Tensor x = f32_from_bits(cast_inputs());
  const Tensor xg = x.to(kGpu);
  for (DType t : {DType::bf16, DType::f16, DType::e4m3, DType::e5m2}) {
    // f32 -> format, nearest even (the Copy kernel, as cast() and autocast use it).
    const Tensor cpu = Tensor::empty(x.shape(), t);
    detail::run_kernel<detail::kernel::Copy>(Device::cpu(), x, cpu);
    const Tensor gpu = Tensor::empty(x.shape(), t, kGpu);
    detail::run_kernel<detail::kernel::Copy>(kGpu, xg, gpu);
    expect_same_bytes(gpu, cpu, std::string("f32 -> ") + std::string(dtype_name(t)));
    // format -> f32 on every pattern of the format.
    const std::int64_t patterns = dtype_size(t) == 2 ? 65536 : 256;
    Tensor all = Tensor::empty({patterns}, t);
    for (std::int64_t p = 0; p < patterns; ++p) {
      if (dtype_size(t) == 2) {
        static_cast<std::uint16_t*>(all.data())[p] = static_cast<std::uint16_t>(p);
      } else {
        static_cast<std::uint8_t*>(all.data())[p] = static_cast<std::uint8_t>(p);
      }
    }
    const Tensor up_cpu = Tensor::empty({patterns}, DType::f32);
    detail::run_kernel<detail::kernel::Copy>(Device::cpu(), all, up_cpu);
    const Tensor up_gpu = Tensor::empty({patterns}, DType::f32, kGpu);
    detail::run_kernel<detail::kernel::Copy>(kGpu, all.to(kGpu), up_gpu);
    expect_same_bytes(up_gpu, up_cpu, std::string(dtype_name(t)) + " -> f32");
    // Stochastic rounding of master weights: the same random bits from (seed, index).
    for (Rounding r : {Rounding::nearest_even, Rounding::stochastic}) {
      const Tensor w_cpu = Tensor::empty(x.shape(), t);
      detail::run_kernel<detail::kernel::RoundInto>(Device::cpu(), x, w_cpu, r, 77);
      const Tensor w_gpu = Tensor::empty(x.shape(), t, kGpu);
      detail::run_kernel<detail::kernel::RoundInto>(kGpu, xg, w_gpu, r, 77);
      expect_same_bytes(w_gpu, w_cpu, std::string("round_into ") + std::string(dtype_name(t)));
    }
  }
}

// The elementwise fast path reads and writes 8 elements a thread where every operand is 16-byte aligned,
// the rest one at a time: views starting 0..8 elements in (aligned or not) and lengths that leave a tail
// give the CPU's bits for casts, binary, unary and unary-backward kernels, in f32, bf16 and f16.
TEST_F(Cuda, TheElementwiseFastPathGivesTheCpusBitsAlignedOrNotWithTails) {
  std::vector<std::uint32_t> bits = cast_inputs();
  bits.resize(8 * 4099 + 8);
  const Tensor base = f32_from_bits(bits), base_gpu = base.to(kGpu);
  for (const DType t : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor typed = cast(base, t), typed_gpu = cast(base_gpu, t);
    for (const std::int64_t start : {0, 1, 3, 8}) {
      const std::int64_t end = 8 * 4099 + (start == 0 ? 5 : 8);  // a tail of 5 or more
      SCOPED_TRACE(std::string(dtype_name(t)) + " from element " + std::to_string(start));
      const Tensor a = slice(typed, 0, start, end), a_gpu = slice(typed_gpu, 0, start, end);
      const Tensor b = slice(typed, 0, 0, end - start), b_gpu = slice(typed_gpu, 0, 0, end - start);
      expect_same_bytes(cast(a_gpu, t == DType::f32 ? DType::bf16 : DType::f32), cast(a, t == DType::f32 ? DType::bf16 : DType::f32), "cast");
      // Exact operations (a NaN's payload aside: the GPU's arithmetic writes its own).
      expect_same_values(mul(a_gpu, b_gpu), mul(a, b), "mul");
      expect_same_values(abs(a_gpu), abs(a), "abs");
      Tensor gx = Tensor::empty(a.shape(), t), gx_gpu = Tensor::empty(a.shape(), t, kGpu);
      detail::run_kernel<detail::kernel::UnaryBackward>(Device::cpu(), UnaryOp::relu, 0.0, a, b, gx);
      detail::run_kernel<detail::kernel::UnaryBackward>(kGpu, UnaryOp::relu, 0.0, a_gpu, b_gpu, gx_gpu);
      expect_same_values(gx_gpu, gx, "relu backward");
    }
  }
}

TEST_F(Cuda, TheAllocatorReusesFreedMemoryAndCountsItLikeTheCpus) {
  reset_peak_memory(kGpu);
  const MemoryStats before = memory_stats(kGpu);
  {
    MemoryCategoryScope scope(MemoryCategory::activations);
    const Tensor a = Tensor::zeros({1024, 1024}, DType::f32, kGpu);
    EXPECT_EQ(memory_stats(kGpu).current_of(MemoryCategory::activations) -
                  before.current_of(MemoryCategory::activations),
              4 << 20);
    EXPECT_EQ(a.to_doubles()[12345], 0.0);
  }
  EXPECT_EQ(memory_stats(kGpu).current_total, before.current_total);
  EXPECT_GE(memory_stats(kGpu).cached, 4 << 20);  // kept for the next step
  release_cached_memory();
}

TEST_F(Cuda, RunningOutOfGpuMemoryIsOneClearError) {
  try {
    const Tensor huge = Tensor::empty({std::int64_t{1} << 48}, DType::f32, kGpu);
    FAIL() << "allocated 1 PiB";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0: out of memory: asked for"), std::string::npos) << e.what();
  }
  const Tensor after = Tensor::full({4}, 2.5, DType::f32, kGpu);  // and the device still works
  EXPECT_EQ(after.to_doubles(), (std::vector<double>{2.5, 2.5, 2.5, 2.5}));
}

TEST_F(Cuda, ATensorOnTheWrongDeviceIsAnErrorNamingBoth) {
  const Tensor a = Tensor::randn({3, 4}, DType::f32, 1).to(kGpu);
  const Tensor b = Tensor::randn({3, 4}, DType::f32, 2);
  try {
    (void)add(a, b);
    FAIL() << "added tensors on two devices";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "binary: a tensor on cpu where cuda:0 was expected; move tensors with to_device() first");
  }
  EXPECT_THROW((void)Tensor::zeros({2}, DType::f32, Device{DeviceType::cuda, 1}), std::invalid_argument);
  // An op's state (batch norm's running statistics) is checked before any of it is updated.
  const Tensor x = Tensor::randn({4, 3, 2, 2}, DType::f32, 3).to(kGpu), ones = Tensor::full({3}, 1.0, DType::f32, kGpu);
  try {
    (void)batch_norm(x, ones, ones, Tensor::zeros({3}, DType::f32), ones, true);
    FAIL() << "batch norm with its running mean on the host";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "batch_norm: gamma, beta and running statistics must be on cuda:0 with x, not on cpu");
  }
}

// One parameter's AdamW update through the list kernel.
void adam_update_one(Device device, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const detail::AdamStep& s) {
  const std::vector<detail::ParamUpdate> list{{.param = p, .grad = g, .state = {m, v}}};
  detail::run_kernel<detail::kernel::AdamUpdate>(device, std::span<const detail::ParamUpdate>(list), s, detail::WriteBack{});
}

// Five AdamW steps with bf16 gradients, bf16 moments and f32 master weights, and an SGD step with
// Nesterov momentum: the same f32 formulas as the CPU's, so the same results within a few f32 ulps
// (the GPU may fuse a multiply and an add the CPU rounds twice).
TEST_F(Cuda, OptimizerStepsFollowTheCpus) {
  const std::int64_t n = 100003;
  Tensor p_cpu = Tensor::randn({n}, DType::f32, 5);
  Tensor m_cpu = Tensor::zeros({n}, DType::bf16), v_cpu = Tensor::zeros({n}, DType::bf16);
  Tensor p_gpu = p_cpu.to(kGpu), m_gpu = m_cpu.to(kGpu), v_gpu = v_cpu.to(kGpu);
  for (int step = 1; step <= 5; ++step) {
    const Tensor g = Tensor::randn({n}, DType::bf16, 100 + static_cast<std::uint64_t>(step), 0, 1e3);
    const detail::AdamStep s{1e-3, 0.9, 0.999, 1e-8, 0.1, true, step, 1.0 / 1024};
    adam_update_one(Device::cpu(), p_cpu, g, m_cpu, v_cpu, s);
    adam_update_one(kGpu, p_gpu, g.to(kGpu), m_gpu, v_gpu, s);
  }
  const std::vector<double> a = p_cpu.to_doubles(), b = p_gpu.to_doubles();
  // In f32 ulps of the parameter or of the updates' size (5 steps of lr 1e-3), whichever is larger: a
  // parameter its updates brought near zero keeps the rounding errors of the terms that cancelled (the
  // first GPU run: 8.1 ulps of a parameter of 8.4e-4); 16, a few for each step (the third: 8.02).
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], 16 * 0x1p-24 * (std::fabs(a[i]) + 5e-3)) << i;
  // The bf16 moments: within one bf16 rounding of each other.
  const std::vector<double> mc = m_cpu.to_doubles(), mg = m_gpu.to_doubles();
  for (std::size_t i = 0; i < mc.size(); ++i) ASSERT_NEAR(mg[i], mc[i], 0x1p-8 * std::fabs(mc[i]) + 1e-30) << i;

  Tensor q_cpu = Tensor::randn({n}, DType::f32, 6), buf_cpu = Tensor::randn({n}, DType::f32, 7);
  Tensor q_gpu = q_cpu.to(kGpu), buf_gpu = buf_cpu.to(kGpu);
  const Tensor g = Tensor::randn({n}, DType::f16, 8);
  const detail::SgdStep s{0.1, 0.9, 1e-4, true, 0.5};
  for (const auto& [device, q, grad, buf] : {std::tuple{Device::cpu(), q_cpu, g, buf_cpu}, std::tuple{kGpu, q_gpu, g.to(kGpu), buf_gpu}}) {
    const std::vector<detail::ParamUpdate> list{{.param = q, .grad = grad, .state = {buf, Tensor()}}};
    detail::run_kernel<detail::kernel::SgdUpdate>(device, std::span<const detail::ParamUpdate>(list), s, detail::WriteBack{});
  }
  const std::vector<double> c = q_cpu.to_doubles(), d = q_gpu.to_doubles();
  for (std::size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(d[i], c[i], 4 * 0x1p-24 * (std::fabs(c[i]) + 1)) << i;
}

// A step's whole list in the GPU's multi-tensor launches (cuda_optim.cu, by chunk_lists.h): more
// parameters than a launch holds (32), more chunks than it holds (256 of 65536 values), bf16 parameters
// with master copies beside f32 ones (two groups), the stochastic write-back in the same pass. The
// masters follow the CPU's within a few f32 ulps; every bf16 parameter holds exactly RoundInto's bits of
// its own master (the draws by (seed + step, element index)).
TEST_F(Cuda, TheOptimizersListUpdateFollowsTheCpusAndWritesBackByTheDefinition) {
  const MasterWeightOptions master{.writeback = Rounding::stochastic, .seed = 21};
  for (const bool adam : {true, false}) {
    SCOPED_TRACE(adam ? "adamw" : "sgd");
    std::vector<Tensor> cpu_params, gpu_params;
    for (int i = 0; i < 40; ++i) {
      const std::int64_t n = i == 0 ? 20000001 : i % 7 == 0 ? 70001 : 1 + 37 * i;
      const DType dtype = i % 2 == 0 ? DType::bf16 : DType::f32;
      const Tensor p = cast(Tensor::uniform({n}, DType::f32, 300 + static_cast<std::uint64_t>(i), -1, 1), dtype);
      cpu_params.push_back(contiguous_copy(p).set_requires_grad());
      gpu_params.push_back(p.to(kGpu).set_requires_grad());
    }
    const auto make = [&](const std::vector<Tensor>& ps) -> std::unique_ptr<Optimizer> {
      if (adam) return std::make_unique<Adam>(ps, AdamOptions{.lr = 1e-3, .weight_decay = 0.1, .state_dtype = DType::bf16, .master = master}, true);
      return std::make_unique<Sgd>(ps, SgdOptions{.lr = 0.01, .momentum = 0.9, .nesterov = true, .master = master});
    };
    const std::unique_ptr<Optimizer> on_cpu = make(cpu_params), on_gpu = make(gpu_params);
    for (int step = 0; step < 3; ++step) {
      for (std::size_t i = 0; i < cpu_params.size(); ++i) {
        const Tensor g = Tensor::randn(cpu_params[i].shape(), cpu_params[i].dtype(), 900 + 41 * static_cast<std::uint64_t>(step) + i);
        cpu_params[i].set_grad(g);
        gpu_params[i].set_grad(g.to(kGpu));
      }
      on_cpu->step(1.0 / 256);
      on_gpu->step(1.0 / 256);
    }
    for (std::size_t i = 0; i < cpu_params.size(); ++i) {
      SCOPED_TRACE("parameter " + std::to_string(i));
      const std::vector<double> a = on_cpu->master_weight(i).to_doubles(), b = on_gpu->master_weight(i).to(Device::cpu()).to_doubles();
      for (std::size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(b[k], a[k], 8 * 0x1p-24 * (std::fabs(a[k]) + 1)) << k;
      if (!on_gpu->has_master_copy(i)) continue;
      const Tensor gpu_master = on_gpu->master_weight(i).to(Device::cpu());
      const Tensor expected = Tensor::empty(gpu_master.shape(), DType::bf16);
      detail::run_kernel<detail::kernel::RoundInto>(Device::cpu(), gpu_master, expected, Rounding::stochastic,
                                                    master.seed + static_cast<std::uint64_t>(on_gpu->steps()));
      const Tensor written = gpu_params[i].to(Device::cpu());
      ASSERT_EQ(std::memcmp(written.data(), expected.data(), static_cast<std::size_t>(written.numel()) * 2), 0);
    }
  }
}

// The loss scaler's pass over a whole step's gradients in one call: the same non-finite and underflow
// counts as the CPU's, the same values written, the sum of squares to f64 rounding. The list mixes
// dtypes, has more tensors than one launch takes (48), a tensor longer than one launch's chunks (512 x
// 32768 elements), empty and one-element tensors, and a transposed view (launched on its own).
TEST_F(Cuda, TheScaleAndCheckPassCountsWhatTheCpusCounts) {
  std::vector<Tensor> cpu_bases, gpu_bases, cpu_list, gpu_list;
  const auto add = [&](Tensor g, bool transposed) {
    std::vector<double> v = g.to_doubles();
    if (v.size() > 9000) {
      v[17] = std::numeric_limits<double>::infinity();
      v[9000] = std::numeric_limits<double>::quiet_NaN();
      v[123] = 1e-9;
    }
    g = Tensor::from_values(v, g.shape(), g.dtype());
    Tensor gg = g.to(kGpu);
    cpu_bases.push_back(g);
    gpu_bases.push_back(gg);
    cpu_list.push_back(transposed ? transpose(g, 0, 1) : g);
    gpu_list.push_back(transposed ? transpose(gg, 0, 1) : gg);
  };
  std::uint64_t seed = 9;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    add(Tensor::randn({300, 701}, t, seed++, 0, 1e-3), false);
    add(Tensor::randn({701, 300}, t, seed++, 0, 1e-3), true);
    add(Tensor::randn({1}, t, seed++, 0, 1e-3), false);
    add(Tensor::zeros({0}, t), false);
    for (int i = 0; i < 30; ++i) add(Tensor::randn({257 + i}, t, seed++, 0, 1e-3), false);
  }
  add(Tensor::randn({17 * 1024 * 1024 + 5}, DType::f32, seed++, 0, 1e-3), false);
  const std::span<const Tensor> on_cpu(cpu_list), on_gpu(gpu_list);
  for (double factor : {1.0, 1.0 / 64}) {
    const detail::GradientCheck cpu = detail::run_kernel<detail::kernel::ScaleAndCheck>(Device::cpu(), on_cpu, factor, 1e-7, Tensor());
    // Unscaled: the totals read back at once; scaled: left on the GPU and read with a step's other values.
    const bool left = factor != 1.0;
    BatchedReads reads(kGpu);
    detail::CheckTotals later;
    const Tensor place = left ? reads.slot(sizeof later, [&](std::span<const std::byte> b) { std::memcpy(&later, b.data(), sizeof later); })
                              : Tensor();
    detail::GradientCheck gpu = detail::run_kernel<detail::kernel::ScaleAndCheck>(kGpu, on_gpu, factor, 1e-7, place);
    if (left) {
      EXPECT_EQ(gpu.nonfinite + gpu.underflow, 0);  // only the count comes back
      reads.read();
      gpu = detail::check_of(later, gpu.count);
    }
    EXPECT_EQ(gpu.count, cpu.count);
    EXPECT_EQ(gpu.nonfinite, cpu.nonfinite);
    EXPECT_EQ(gpu.underflow, cpu.underflow);
    // The CPU adds a block's squares in f32 (a norm needs no more), the GPU each square in f64: the first
    // GPU run differed by 3.7e-9 of the sum.
    EXPECT_NEAR(gpu.sum_squares, cpu.sum_squares, 1e-6 * cpu.sum_squares);
    for (std::size_t i = 0; i < cpu_bases.size(); ++i) {
      expect_same_bytes(gpu_bases[i], cpu_bases[i], "gradient " + std::to_string(i) + " scaled by " + std::to_string(factor));
    }
  }
}

// A linear layer's forward and backward entirely on the GPU, gradients back on the CPU's leaves.
TEST_F(Cuda, GradientsFlowBackAcrossDevices) {
  Tensor x = Tensor::randn({8, 16}, DType::f32, 10);
  Tensor w = Tensor::randn({4, 16}, DType::f32, 11);
  x.set_requires_grad();
  w.set_requires_grad();
  const Tensor y = linear(to_device(x, kGpu), to_device(w, kGpu), Tensor());
  ASSERT_EQ(y.device(), kGpu);
  mul(y, y).backward(Tensor::full({8, 4}, 1, DType::f32, kGpu));
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), Device::cpu());
  Tensor xr = Tensor::randn({8, 16}, DType::f32, 10), wr = Tensor::randn({4, 16}, DType::f32, 11);
  xr.set_requires_grad();
  wr.set_requires_grad();
  const Tensor yr = linear(xr, wr, Tensor());
  mul(yr, yr).backward(Tensor::full({8, 4}, 1, DType::f32));
  const std::vector<double> a = x.grad().to_doubles(), b = xr.grad().to_doubles();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (std::fabs(b[i]) + 1)) << i;
}

}  // namespace
}  // namespace mantissa

namespace mantissa {
namespace {

using GptModel = train::ModuleModel<nn::Gpt>;

train::TrainerOptions run_options(DType compute, Device device, std::int64_t steps) {
  train::TrainerOptions o;
  o.precision = {compute};
  o.steps = steps;
  o.device = device;
  return o;
}

// A small GPT on the fortunes, the same seeds on both devices.
struct GptRun {
  GptModel model{nn::GptConfig{.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 32, .vocab = 256, .seed = 3}};
  train::TextData data{TextCorpus::load(kFortunesDir), 8, 32, 0, 2, "fortunes"};
  train::Trainer trainer;
  GptRun(DType compute, Device device) : trainer(model, data, run_options(compute, device, 40)) {}
};

// 40 AdamW steps in bf16 and in fp16 with dynamic loss scaling: the GPU's loss curve follows the CPU's
// (the kernels round differently, so the trajectories part slowly: every loss within 3%, and the same
// skipped steps), and everything the step touched lives on the GPU.
TEST_F(Cuda, AGptTrainsOnTheGpuAlongTheCpusCurve) {
  for (DType compute : {DType::bf16, DType::f16}) {
    GptRun cpu(compute, Device::cpu()), gpu(compute, kGpu);
    for (int s = 0; s < 40; ++s) {
      const train::StepRecord a = cpu.trainer.step(), b = gpu.trainer.step();
      ASSERT_EQ(a.skipped, b.skipped) << dtype_name(compute) << " step " << s + 1;
      ASSERT_NEAR(b.loss, a.loss, 0.03 * a.loss) << dtype_name(compute) << " step " << s + 1;
    }
    for (const Tensor& p : gpu.model.module().parameters()) ASSERT_EQ(p.device(), kGpu);
    EXPECT_GT(memory_stats(kGpu).peak_of(MemoryCategory::activations), 0);
  }
}

using CnnModel = train::ModuleModel<nn::Cnn>;

// The CNN (convolutions through cuDNN, batch norm, pooling) on Fashion-MNIST's test split (the part
// scripts/gpu-pack.sh carries to the GPU machine), the same seeds on both devices.
struct CnnRun {
  CnnModel model{nn::CnnConfig{.width = 16, .seed = 5}};
  train::ClassificationData data{load_mnist_format(kFashionMnistDir, false), load_mnist_format(kFashionMnistDir, false), 64, 1};
  train::Trainer trainer;
  CnnRun(DType compute, Device device) : trainer(model, data, run_options(compute, device, 30)) {}
};

// 30 steps in f32, bf16 and fp16 with dynamic loss scaling: the GPU's loss curve follows the CPU's, and
// the batch-norm statistics end on the GPU.
TEST_F(Cuda, TheCnnTrainsOnTheGpuAlongTheCpusCurve) {
  for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
    CnnRun cpu(compute, Device::cpu()), gpu(compute, kGpu);
    for (int s = 0; s < 30; ++s) {
      const train::StepRecord a = cpu.trainer.step(), b = gpu.trainer.step();
      ASSERT_EQ(a.skipped, b.skipped) << dtype_name(compute) << " step " << s + 1;
      ASSERT_NEAR(b.loss, a.loss, 0.03 * a.loss) << dtype_name(compute) << " step " << s + 1;
    }
    for (const auto& [name, b] : gpu.model.module().named_buffers()) ASSERT_EQ(b.device(), kGpu) << name;
  }
}

// FP8 products on the GPU (its quantizer and scaled product), each recipe for 20 steps of the small GPT:
// the GPU's loss curve follows the CPU's, and delayed scaling's state stays on the host, where the
// recipe updates it (and checkpoints read it).
TEST_F(Cuda, Fp8TrainsOnTheGpuAlongTheCpusCurve) {
  for (QuantRecipe recipe : {QuantRecipe::delayed, QuantRecipe::current, QuantRecipe::block}) {
    const auto options = [&](Device device) {
      train::TrainerOptions o = run_options(DType::bf16, device, 20);
      o.precision.fp8 = QuantOptions{.recipe = recipe, .block = 32};
      return o;
    };
    GptModel cpu_model{nn::GptConfig{.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 32, .vocab = 256, .seed = 3}};
    GptModel gpu_model{nn::GptConfig{.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 32, .vocab = 256, .seed = 3}};
    train::TextData cpu_data{TextCorpus::load(kFortunesDir), 8, 32, 0, 2, "fortunes"};
    train::TextData gpu_data{TextCorpus::load(kFortunesDir), 8, 32, 0, 2, "fortunes"};
    train::Trainer cpu(cpu_model, cpu_data, options(Device::cpu())), gpu(gpu_model, gpu_data, options(kGpu));
    for (int s = 0; s < 20; ++s) {
      const train::StepRecord a = cpu.step(), b = gpu.step();
      ASSERT_NEAR(b.loss, a.loss, 0.03 * a.loss) << recipe.name() << " step " << s + 1;
    }
    for (const auto& [name, b] : gpu_model.module().named_buffers()) {
      if (name.find("fp8_") != std::string::npos) {
        EXPECT_EQ(b.device(), Device::cpu()) << name;
      }
    }
  }
}

// A checkpoint written by a run on the GPU resumes on the CPU (and back) to the same next step.
TEST_F(Cuda, CheckpointsMoveBetweenTheGpuAndTheCpu) {
  const auto dir = std::filesystem::temp_directory_path() / ("mantissa_gpu_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  GptRun gpu(DType::bf16, kGpu);
  for (int s = 0; s < 5; ++s) gpu.trainer.step();
  gpu.trainer.save(dir / "step5.safetensors");
  const double next_on_gpu = gpu.trainer.step().loss;
  GptRun cpu(DType::bf16, Device::cpu());
  cpu.trainer.resume(dir / "step5.safetensors");
  const double next_on_cpu = cpu.trainer.step().loss;
  EXPECT_NEAR(next_on_cpu, next_on_gpu, 0.01 * next_on_gpu);
  cpu.trainer.save(dir / "step6.safetensors");
  GptRun back(DType::bf16, kGpu);
  back.trainer.resume(dir / "step6.safetensors");
  EXPECT_TRUE(std::isfinite(back.trainer.step().loss));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mantissa
