// The kernel registry: the reference and the CPU backend each register every kernel of kernels.h, ops
// reach them through run_kernel (the reference under CpuBackendScope, and for f64 tensors), a CUDA build
// registers them all for the GPU, a device without a kernel is an error naming the kernel and the
// device, and kernels are timed by family, on the device's own clock when asked.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "../../src/backend/registry.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/backend/kernel_timer.h"
#include "mantissa/ops/ops.h"

namespace mantissa::detail {
namespace {

template <class K>
void expect_one_registered(Impl impl) {
  EXPECT_NE(KernelTable<K>::fn[static_cast<std::size_t>(impl)], nullptr) << K::name << " on " << impl_name(impl);
}

template <class... K>
void expect_registered(Impl impl) {
  impl_for(Device::cpu());  // registers every backend's kernels
  (expect_one_registered<K>(impl), ...);
}

TEST(KernelRegistry, TheReferenceAndTheCpuBackendRegisterEveryKernel) {
  for (Impl impl : {Impl::reference, Impl::cpu}) {
    using namespace kernel;
    expect_registered<Copy, Binary, Unary, UnaryBackward, Reduce, Matmul, MatmulAccumulate, MatmulRowSums, MatmulGelu, MatmulGeluBackward, Softmax, SoftmaxBackward, CrossEntropy,
                      CrossEntropyBackward, AttentionSoftmax, AttentionSoftmaxBackward, ScaleAndCheck, SgdUpdate,
                      AdamUpdate, RoundInto, LayerNorm, AddLayerNorm, LayerNormBackward, BatchNorm, BatchNormBackward, Embedding,
                      EmbeddingBackward, Conv2d, Conv2dBackwardData, Conv2dBackwardWeights, Pool2d, Pool2dBackward,
                      Fp8Amax, Fp8QuantizeCurrent, Fp8Quantize, BlockQuantize, HadamardRows, ScaledMatmul>(impl);
  }
}

// A CUDA build registers every kernel for the GPU too (convolutions where cuDNN's header was found);
// its BlockQuantize runs every rule (the microscaled ones by the CPU's own scale rules).
TEST(KernelRegistry, TheCudaBackendRegistersEveryKernelWhereItIsBuilt) {
  const CudaInfo info = cuda_info();
  if (!info.built) GTEST_SKIP() << info.unavailable;
  using namespace kernel;
  expect_registered<Copy, Binary, Unary, UnaryBackward, Reduce, Matmul, MatmulAccumulate, MatmulRowSums, MatmulGelu, MatmulGeluBackward, Softmax, SoftmaxBackward, CrossEntropy,
                    CrossEntropyBackward, AttentionSoftmax, AttentionSoftmaxBackward, ScaleAndCheck, SgdUpdate, AdamUpdate,
                    RoundInto, LayerNorm, AddLayerNorm, LayerNormBackward, BatchNorm, BatchNormBackward, Embedding, EmbeddingBackward,
                    Pool2d, Pool2dBackward, LstmCell, LstmCellBackward, Numerics, Fp8Amax, Fp8QuantizeCurrent, Fp8Quantize,
                    BlockQuantize, HadamardRows, ScaledMatmul>(Impl::cuda);
  bool cudnn = false;
  for (const auto& [family, dtypes] : info.kernels) cudnn = cudnn || family.find("cuDNN") != std::string::npos;
  if (cudnn) expect_registered<Conv2d, Conv2dBackwardData, Conv2dBackwardWeights>(Impl::cuda);
}

// A kernel a device lacks (taken out of the table for the test: a CUDA build has them all) is an error
// naming both; an undefined tensor passes the device check, so the lookup is reached, GPU or not.
TEST(KernelRegistry, ADeviceWithoutTheKernelIsAnErrorNamingBoth) {
  impl_for(Device::cpu());  // registers every backend's kernels
  auto& slot = KernelTable<kernel::Numerics>::fn[static_cast<std::size_t>(Impl::cuda)];
  auto* const saved = slot;
  slot = nullptr;
  const Tensor none;
  try {
    run_kernel<kernel::Numerics>(Device{DeviceType::cuda, 0}, none, 1.0, std::span<const double>{});
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "numerics: no kernel for device cuda:0 (cuda) in this build");
  }
  slot = saved;
}

TEST(KernelRegistry, ATensorOnAnotherDeviceIsAnErrorNamingBoth) {
  const Tensor a = Tensor::zeros({4}, DType::f32);
  try {
    run_kernel<kernel::Copy>(Device{DeviceType::cuda, 0}, a, a);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "copy: a tensor on cpu where cuda:0 was expected; move tensors with to_device() first");
  }
}

TEST(KernelRegistry, KernelsAreTimedUnderTheirFamily) {
  reset_kernel_times();
  const Tensor a = Tensor::randn({8, 8}, DType::f32, 1);
  (void)matmul(a, a);
  (void)cast(a, DType::bf16);
  const KernelTimes t = kernel_times();
  EXPECT_EQ(t.backend_seconds.count("matmul"), 1u);
  EXPECT_EQ(t.backend_seconds.count("cast"), 1u);
  EXPECT_EQ(t.matmul_flops, 2.0 * 8 * 8 * 8);
  EXPECT_EQ(t.backend_flops.at("matmul"), 2.0 * 8 * 8 * 8);
  EXPECT_EQ(t.backend_flops.count("cast"), 0u);
}

// By kernel, for a finer breakdown (MANTISSA_KERNEL_TIMES=kernel): each kernel's own name, a region
// still winning; back by family after.
TEST(KernelRegistry, KernelsCanBeTimedUnderTheirOwnNames) {
  const Tensor a = Tensor::randn({8, 8}, DType::f32, 1);
  set_kernel_times_by_kernel(true);
  reset_kernel_times();
  (void)matmul(a, a);
  (void)add(a, a);
  {
    KernelRegion region("attention");
    (void)mul(a, a);
  }
  set_kernel_times_by_kernel(false);
  (void)cast(a, DType::bf16);
  const KernelTimes t = kernel_times();
  std::vector<std::string> names;
  for (const auto& [name, seconds] : t.backend_seconds) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"attention", "binary", "cast", "matmul"}));
  EXPECT_EQ(t.backend_flops.at("matmul"), 2.0 * 8 * 8 * 8);
}

// Each kernel call counts the bytes its tensors hold under its family or region: inputs and outputs
// once, a broadcast input's distinct values only, what an optimizer or the loss scaler updates in place
// twice (read and written).
TEST(KernelRegistry, KernelsCountTheBytesTheirTensorsHold) {
  const Tensor a = Tensor::randn({8, 16}, DType::f32, 1);
  const Tensor row = Tensor::randn({16}, DType::f32, 2);
  reset_kernel_times();
  (void)cast(a, DType::bf16);                // 512 read, 256 written
  (void)add(a, expand(row, {8, 16}));        // 512 + 64 (16 distinct values) read, 512 written
  {
    KernelRegion region("attention");
    (void)mul(a, a);                         // 3 x 512, counted under the region
  }
  KernelTimes t = kernel_times();
  EXPECT_EQ(t.backend_bytes.at("cast"), 512 + 256);
  EXPECT_EQ(t.backend_bytes.at("elementwise"), 512 + 64 + 512);
  EXPECT_EQ(t.backend_bytes.at("attention"), 3 * 512);

  reset_kernel_times();
  const Tensor p = Tensor::randn({100}, DType::f32, 3), g = Tensor::randn({100}, DType::bf16, 4);
  const Tensor m = Tensor::zeros({100}, DType::f32), v = Tensor::zeros({100}, DType::f32);
  const std::vector<ParamUpdate> list{{.param = p, .grad = g, .state = {m, v}}};
  run_kernel<kernel::AdamUpdate>(Device::cpu(), std::span<const ParamUpdate>(list),
                                 AdamStep{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .decoupled = true, .step = 1},
                                 WriteBack{});
  const std::vector<Tensor> grads{g};
  (void)run_kernel<kernel::ScaleAndCheck>(Device::cpu(), std::span<const Tensor>(grads), 0.5, 0.0, Tensor());
  (void)run_kernel<kernel::ScaleAndCheck>(Device::cpu(), std::span<const Tensor>(grads), 1.0, 0.0, Tensor());
  t = kernel_times();
  EXPECT_EQ(t.backend_bytes.at("optimizer"), 3 * 2 * 400 + 200);
  EXPECT_EQ(t.backend_bytes.at("loss_scaling"), 2 * 200 + 200);  // a factor of 1 only reads
  reset_kernel_times();
  EXPECT_TRUE(kernel_times().backend_bytes.empty());
}

// A device clock standing in for the GPU's, on the CPU: what it was asked to time, in order.
std::vector<std::string> clock_calls;
DeviceKernelClock fake_clock() {
  return {[](const char* name) { clock_calls.push_back(std::string("begin ") + name); },
          [] { clock_calls.emplace_back("end"); },
          [] { return std::map<std::string, double>{{"matmul", 0.25}}; }};
}

// With device kernel timing on, each outermost kernel call runs the device's clock under its family or
// region; off, the clock is never called; device_kernel_seconds() is what the clocks collected.
TEST(KernelRegistry, DeviceKernelTimingBracketsEachOutermostKernelCall) {
  const Tensor a = Tensor::randn({8, 8}, DType::f32, 1);
  set_device_kernel_clock(DeviceType::cpu, fake_clock());
  clock_calls.clear();
  (void)matmul(a, a);
  EXPECT_TRUE(clock_calls.empty()) << "timing is off by default";
  set_device_kernel_timing(true);
  (void)matmul(a, a);
  (void)cast(a, DType::bf16);
  {
    KernelRegion region("attention");
    (void)add(a, a);
  }
  set_device_kernel_timing(false);
  (void)matmul(a, a);
  EXPECT_EQ(clock_calls, (std::vector<std::string>{"begin matmul", "end", "begin cast", "end", "begin attention", "end"}));
  EXPECT_EQ(device_kernel_seconds(), (std::map<std::string, double>{{"matmul", 0.25}}));
  set_device_kernel_clock(DeviceType::cpu, {});
  EXPECT_TRUE(device_kernel_seconds().empty() || cuda_available());
}

TEST(KernelRegistry, F64TensorsAndTheReferenceScopeRunTheReference) {
  EXPECT_EQ(impl_for(Device::cpu()), Impl::cpu);
  {
    CpuBackendScope scope(CpuBackend::reference);
    EXPECT_EQ(impl_for(Device::cpu()), Impl::reference);
  }
  // f64 has no CPU (f32) kernel path: the product must be the exact double one.
  const Tensor a = Tensor::from_values({1.0 + 1e-12, 1.0}, {1, 2}, DType::f64);
  const Tensor b = Tensor::from_values({1.0, -1.0}, {2, 1}, DType::f64);
  EXPECT_EQ(matmul(a, b).item(), (1.0 + 1e-12) - 1.0);
}

}  // namespace
}  // namespace mantissa::detail
