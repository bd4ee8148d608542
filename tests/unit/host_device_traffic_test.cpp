// The count of host <-> device copies and host waits (storage.h: host_device_traffic), checked without a
// GPU: a fake device allocator on host memory stands in for the GPU's, and the counts must follow what
// crosses. A tensor filled with one value is made where it lives (no copy, no wait): the loss
// gradient's seed and the ones of a bias gradient are such tensors. And the mechanism's other half:
// every wait and every copy to the host in the CUDA backend's sources goes through the runtime file that
// counts them, which a scan of the sources checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "../../src/backend/registry.h"
#include "mantissa/core/batched_reads.h"
#include "mantissa/core/storage.h"
#include "mantissa/core/tensor.h"
#include "mantissa/nn/models.h"
#include "mantissa/train/trainer.h"
#include "source_scan.h"

namespace mantissa {
namespace {

// Host memory posing as a device's: copies out of it wait (as a GPU's do), and say so.
class FakeDeviceMemory final : public Allocator {
 public:
  void* allocate(std::size_t bytes, Device) override { return ::operator new(bytes == 0 ? 1 : bytes); }
  void deallocate(void* p, std::size_t, Device) override { ::operator delete(p); }
  void copy_to_host(void* host, const void* src, std::size_t bytes) override {
    note_device_wait();
    note_waited(0.25);  // as if the device had been busy for a quarter of a second
    std::memcpy(host, src, bytes);
  }
};

class FakeDevice {
 public:
  FakeDevice() : previous_(register_allocator(DeviceType::cuda, &memory_)) {}
  ~FakeDevice() { register_allocator(DeviceType::cuda, previous_); }
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;

 private:
  FakeDeviceMemory memory_;
  Allocator* previous_;
};

constexpr Device kGpu{DeviceType::cuda, 0};

HostDeviceTraffic since(const HostDeviceTraffic& before) {
  const HostDeviceTraffic now = host_device_traffic();
  return {now.to_host - before.to_host, now.from_host - before.from_host, now.waits - before.waits,
          now.wait_seconds - before.wait_seconds};
}

TEST(HostDeviceTraffic, CopiesAcrossAreCountedAndFillsStayOnTheDevice) {
  const FakeDevice fake;
  HostDeviceTraffic start = host_device_traffic();
  // Filled where it lives: the value's encoding repeated by the device's allocator.
  for (const DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::f64}) {
    const Tensor ones = Tensor::full({3, 5}, 1.0, t, kGpu);
    const Tensor zeros = Tensor::zeros({7}, t, kGpu);
    (void)zeros;
    HostDeviceTraffic d = since(start);
    EXPECT_EQ(d.to_host, 0U);
    EXPECT_EQ(d.from_host, 0U);
    EXPECT_EQ(d.waits, 0U);
    // Its values, read back once: one copy to the host, one wait.
    for (const double v : ones.to(Device::cpu()).to_doubles()) EXPECT_EQ(v, 1.0) << dtype_name(t);
    d = since(start);
    EXPECT_EQ(d.to_host, 1U);
    EXPECT_EQ(d.waits, 1U);
    EXPECT_DOUBLE_EQ(d.wait_seconds, 0.25);  // and how long it took
    start = host_device_traffic();
  }
  // Up and back: one copy each way; between two tensors on the device, none.
  const Tensor host = Tensor::from_values({1, -2, 3.5}, {3}, DType::f32);
  const Tensor up = host.to(kGpu);
  const Tensor again = up.to(kGpu);
  EXPECT_EQ(since(start).from_host, 1U);
  EXPECT_EQ(since(start).to_host, 0U);
  EXPECT_EQ(again.to(Device::cpu()).to_doubles(), (std::vector<double>{1, -2, 3.5}));
  EXPECT_EQ(since(start).to_host, 1U);
  EXPECT_EQ(since(start).waits, 1U);
  // A value that does not round to itself: the one rounding is the host's, as on the CPU.
  const Tensor third = Tensor::full({4}, 1.0 / 3.0, DType::bf16, kGpu);
  EXPECT_EQ(third.to(Device::cpu()).to_doubles(), Tensor::full({4}, 1.0 / 3.0, DType::bf16).to_doubles());
}

// Reads batched for a step (core/batched_reads.h): taking slots and values queues nothing the host
// waits for; read() is one copy to the host and one wait, whatever the number of slots under 64 KiB.
TEST(HostDeviceTraffic, BatchedReadsWaitOnceForAllTheirValues) {
  const FakeDevice fake;
  const Tensor loss = Tensor::full({1}, 2.5, DType::f32, kGpu);
  const Tensor half_loss = Tensor::full({1}, 0.75, DType::bf16, kGpu);
  const HostDeviceTraffic start = host_device_traffic();
  BatchedReads reads(kGpu);
  std::vector<double> got;
  reads.value(loss, [&](double v) { got.push_back(v); });
  for (int i = 0; i < 200; ++i) {
    const Tensor slot = reads.slot(32, [&, i](std::span<const std::byte> bytes) {
      EXPECT_EQ(bytes.size(), 32U);
      std::uint32_t v = 0;
      std::memcpy(&v, bytes.data() + 4, sizeof v);
      got.push_back(v == static_cast<std::uint32_t>(i) * 7 ? 1.0 : -1.0);
    });
    const std::vector<double> zeros(32, 0.0);
    EXPECT_EQ(slot.to(Device::cpu()).to_doubles(), zeros);  // zeroed (this check copies: not counted below)
    const std::uint32_t v = static_cast<std::uint32_t>(i) * 7;
    std::memcpy(static_cast<std::byte*>(slot.data()) + 4, &v, sizeof v);  // as a kernel would write it
  }
  reads.value(half_loss, [&](double v) { got.push_back(v); });
  EXPECT_EQ(reads.pending(), 202U);
  const HostDeviceTraffic before_read = host_device_traffic();
  EXPECT_EQ(before_read.waits - start.waits, 200U);  // only the zero checks above
  reads.read();
  EXPECT_EQ(since(before_read).to_host, 1U);
  EXPECT_EQ(since(before_read).waits, 1U);
  ASSERT_EQ(got.size(), 202U);  // every use, in the order taken
  EXPECT_EQ(got.front(), 2.5);
  EXPECT_EQ(got.back(), 0.75);
  for (std::size_t i = 1; i + 1 < got.size(); ++i) EXPECT_EQ(got[i], 1.0) << i;
  EXPECT_EQ(reads.pending(), 0U);
  reads.read();  // nothing taken: nothing copied
  EXPECT_EQ(since(before_read).waits, 1U);
  // More than a block's worth: one copy and one wait a block.
  for (int i = 0; i < 3; ++i) (void)reads.slot(BatchedReads::kBlockBytes / 2 + 16, [](std::span<const std::byte>) {});
  reads.read();
  EXPECT_EQ(since(before_read).waits, 4U);
  EXPECT_THROW(reads.value(Tensor::full({2}, 1.0, DType::f32, kGpu), [](double) {}), std::invalid_argument);
  EXPECT_THROW(reads.value(Tensor::full({1}, 1.0, DType::f32), [](double) {}), std::invalid_argument);
}

// The reads of 4 steps of `model` on `data` on the fake device, a step at a time: one each, from the
// first (with FP8 too: the delayed recipe's first step, which has no amax history, and current scaling
// fit each operand's scale to its own amax on the device, where the product reads it).
void expect_one_read_a_step(train::Model& model, train::DataSource& data, train::PrecisionPolicy precision) {
  train::TrainerOptions o;
  const bool fp8 = precision.fp8.has_value();
  o.precision = std::move(precision);
  o.steps = 4;
  o.device = kGpu;
  train::Trainer trainer(model, data, o);
  for (int step = 1; step <= 4; ++step) {
    const HostDeviceTraffic start = host_device_traffic();
    const train::StepRecord rec = trainer.step();
    EXPECT_EQ(since(start).waits, 1U) << "step " << step;
    EXPECT_EQ(since(start).to_host, 1U) << "step " << step;
    EXPECT_TRUE(std::isfinite(rec.loss));
    if (fp8) {
      ASSERT_TRUE(rec.fp8.has_value());
      EXPECT_GT(rec.fp8->quantized, 0);
    }
  }
}

// A whole training step on the fake device (its kernels the CPU's): the host reads from the device once
// a step, the step's batched read (the losses, the loss scaler's check; with FP8, every quantizer's
// counts), for an MLP in bf16 autocast and in every FP8 recipe, and for the GPT in bf16 and in fp16
// with dynamic loss scaling. A read added anywhere in a step (an item(), a to(cpu)) fails here. (The backend's own
// reads are the GPU kernels' and not seen by the fake: their slots are checked by the GPU cases.)
// Tensors on cuda:0 run the CPU's kernels while one lives (detail::set_cpu_kernels_for_gpu_tensors),
// the setting before restored however the test leaves.
class CpuKernelsForGpuTensors {
 public:
  CpuKernelsForGpuTensors() : before_(detail::set_cpu_kernels_for_gpu_tensors(true)) {}
  ~CpuKernelsForGpuTensors() { detail::set_cpu_kernels_for_gpu_tensors(before_); }
  CpuKernelsForGpuTensors(const CpuKernelsForGpuTensors&) = delete;
  CpuKernelsForGpuTensors& operator=(const CpuKernelsForGpuTensors&) = delete;

 private:
  bool before_;
};

TEST(HostDeviceTraffic, ATrainingStepOnADeviceReadsFromItOnce) {
  const FakeDevice fake;
  const CpuKernelsForGpuTensors cpu_kernels;
  ImageDataset images;
  images.images = Tensor::uniform({96, 1, 4, 4}, DType::f32, 5, 0, 1);
  for (std::int64_t i = 0; i < 96; ++i) images.labels.push_back(i % 4);
  images.classes = 4;
  const std::vector<std::optional<QuantRecipe>> recipes = {std::nullopt,       QuantRecipe::delayed, QuantRecipe::current,
                                                         QuantRecipe::block,   QuantRecipe::mxfp8,   QuantRecipe::mxfp4,
                                                         QuantRecipe::nvfp4};
  for (const std::optional<QuantRecipe> recipe : recipes) {
    SCOPED_TRACE(recipe ? "mlp, fp8 " + std::string(recipe->name()) : std::string("mlp, bf16 autocast"));
    train::ModuleModel<nn::Mlp> mlp{nn::MlpConfig{.in = 16, .hidden = 32, .layers = 3, .classes = 4, .seed = 3}};
    train::ClassificationData data{images, images, 32, 5};
    expect_one_read_a_step(mlp, data, {DType::bf16, train::PrecisionMode::autocast,
                                       recipe ? std::optional(QuantOptions{.recipe = *recipe}) : std::nullopt});
  }
  std::vector<std::uint8_t> text;
  for (int i = 0; text.size() < 8192; ++i) {
    for (const char c : "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n") text.push_back(static_cast<std::uint8_t>(c));
  }
  for (const DType compute : {DType::bf16, DType::f16}) {
    SCOPED_TRACE("gpt, " + std::string(dtype_name(compute)) + " autocast");
    train::ModuleModel<nn::Gpt> gpt{nn::GptConfig{.n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 16, .seed = 3}};
    train::TextData data(TextCorpus::from_bytes(text, "generated text"), 4, 16, 0, 1, "generated");
    expect_one_read_a_step(gpt, data, {compute, train::PrecisionMode::autocast});
  }
}

// Every source line that waits for the GPU or copies to the host: cuda_runtime.cu (wait_for_stream,
// wait_for_event, the allocator's copies) counts them; elsewhere such a call would be a wait nobody
// counts.
TEST(HostDeviceTraffic, OnlyTheRuntimeWaitsForTheGpuOrCopiesToTheHost) {
  const std::set<std::string> home = {"src/backend/cuda/cuda_runtime.cu"};
  const testing::SourceScan waits =
      testing::scan_sources({"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize"}, true, home);
  const testing::SourceScan copies =
      testing::scan_sources({"cudaMemcpy", "cudaMemcpyAsync"}, true, home, [](std::string_view statement) {
        return statement.find("DeviceToDevice") == std::string_view::npos;  // to or from the host, or either
      });
  EXPECT_GT(waits.files, 100);
  for (const testing::SourceScan* scan : {&waits, &copies}) {
    for (const std::string& m : scan->matches) {
      ADD_FAILURE() << m << " (wait through wait_for_stream / wait_for_event, copy through copy_bytes)";
    }
  }
}

}  // namespace
}  // namespace mantissa
