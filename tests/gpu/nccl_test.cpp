// Data parallel on GPUs: the gradient reducer over NCCL, with one rank (what a one-GPU machine can run;
// several ranks on several GPUs: tests/cli/dist_cli_test.cpp). With parameters on the GPU the reducer
// goes through NCCL and gives, bit for bit, what the CPU's reducer gives for the same gradients, for
// every wire format and gradient dtype; an inf reaches the average; unused parameters get zero gradients.
// Skipped, with the reason, without a GPU. On every machine: what NCCL says when it cannot be used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mantissa/backend/cuda.h"
#include "mantissa/dist/device_reducer.h"
#include "mantissa/dist/grad_reducer.h"
#include "mantissa/ops/ops.h"
#include "gpu_test.h"

namespace mantissa {
namespace {

const Device kGpu{DeviceType::cuda, 0};

class CudaNccl : public testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const dist::NcclInfo info = dist::nccl_info();
    if (!info.unavailable.empty()) GTEST_SKIP() << info.unavailable;
  }
};

// Gradient i: normal values spread over 2^-30..2^12, so bf16 and fp16 round (and fp16 flushes some).
Tensor gradient(const Shape& shape, DType dtype, std::uint64_t seed) {
  const Tensor g = Tensor::randn(shape, DType::f32, seed);
  const Tensor e = Tensor::uniform(shape, DType::f32, seed + 77, -30, 12);
  const std::vector<double> gv = g.to_doubles(), ev = e.to_doubles();
  std::vector<float> v(gv.size());
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(gv[k] * std::exp2(std::floor(ev[k])));
  Tensor out = Tensor::empty(shape, DType::f32);
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return dtype == DType::f32 ? out : cast(out, dtype);
}

struct Reduced {
  std::vector<Tensor> grads;  // on the host
  dist::ReducerStats stats;
  bool on_gpu = false;
};

// The parameters' gradients averaged over one rank by the reducer on `device`, in small buckets handed
// over in backward's order.
Reduced reduce_on(Device device, DType wire, const std::vector<DType>& dtypes, bool with_inf = false) {
  const std::vector<Shape> shapes{{37}, {5, 13}, {300}, {2, 2}, {4097}};
  std::vector<Tensor> params;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(Tensor::zeros(shapes[i], dtypes[i % dtypes.size()], device).set_requires_grad(true));
  }
  dist::GradReducer reducer(dist::ProcessGroup::single(), params, {.wire = wire, .bucket_bytes = 256, .overlap = true});
  reducer.begin();
  for (std::size_t i = params.size(); i-- > 0;) {
    Tensor g = gradient(params[i].shape(), params[i].dtype(), 100 + i);
    if (with_inf && i == 2) {
      const Tensor inf = Tensor::full({1}, std::numeric_limits<double>::infinity(), g.dtype());
      copy_bytes(g.storage(), 7 * dtype_size(g.dtype()), inf.storage(), 0, dtype_size(g.dtype()));
    }
    params[i].set_grad(g.to(device));
    reducer.ready(params[i]);
  }
  Reduced out;
  out.stats = reducer.finish();
  out.on_gpu = reducer.on_gpu();
  for (const Tensor& p : params) out.grads.push_back(p.grad().to(Device::cpu()));
  return out;
}

TEST_F(CudaNccl, TheReducerOnTheGpuGivesTheCpusBitsForEveryWireFormat) {
  for (DType wire : {DType::f32, DType::bf16, DType::f16}) {
    const std::vector<DType> dtypes{DType::f32, DType::bf16, DType::f16};
    const Reduced cpu = reduce_on(Device::cpu(), wire, dtypes), gpu = reduce_on(kGpu, wire, dtypes);
    EXPECT_FALSE(cpu.on_gpu);
    EXPECT_TRUE(gpu.on_gpu);
    EXPECT_EQ(gpu.stats.buckets, cpu.stats.buckets);
    EXPECT_GE(gpu.stats.buckets, 3);
    EXPECT_EQ(gpu.stats.bytes_sent, 0);  // one rank sends nothing
    for (std::size_t i = 0; i < cpu.grads.size(); ++i) {
      const Tensor& a = cpu.grads[i];
      const Tensor& b = gpu.grads[i];
      ASSERT_EQ(a.dtype(), b.dtype());
      const std::size_t bytes = static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), bytes)) << "wire " << dtype_name(wire) << ", parameter " << i;
    }
  }
}

TEST_F(CudaNccl, AnInfInOneGradientReachesTheAverage) {
  const Reduced gpu = reduce_on(kGpu, DType::bf16, {DType::f32}, true);
  EXPECT_TRUE(std::isinf(gpu.grads[2].to_doubles()[7]));
  EXPECT_TRUE(std::isfinite(gpu.grads[2].to_doubles()[6]));
}

TEST_F(CudaNccl, UnusedParametersGetZeroGradientsOnTheGpu) {
  std::vector<Tensor> params{Tensor::zeros({10}, DType::f32, kGpu).set_requires_grad(true),
                             Tensor::zeros({3, 3}, DType::bf16, kGpu).set_requires_grad(true)};
  dist::GradReducer reducer(dist::ProcessGroup::single(), params, {});
  reducer.begin();
  params[0].set_grad(Tensor::full({10}, 2.5, DType::f32, kGpu));
  reducer.ready(params[0]);
  reducer.finish();
  ASSERT_TRUE(params[1].grad().defined());
  EXPECT_EQ(params[1].grad().device(), kGpu);
  for (double v : params[1].grad().to(Device::cpu()).to_doubles()) EXPECT_EQ(v, 0.0);
  for (double v : params[0].grad().to(Device::cpu()).to_doubles()) EXPECT_EQ(v, 2.5);
}

// On every machine: where NCCL cannot be used, the reason; on the CPU, the reducer never asks for it.
TEST(Nccl, SaysWhyItCannotBeUsedAndIsNotUsedForCpuParameters) {
  const dist::NcclInfo info = dist::nccl_info();
  if (!info.built || !cuda_available()) {
    EXPECT_FALSE(info.unavailable.empty());
  } else if (info.unavailable.empty()) {
    EXPECT_FALSE(info.version.empty());
  }
  try {
    dist::make_nccl_reducer(*dist::ProcessGroup::single(), Device::cpu());
    FAIL() << "an NCCL reducer for the CPU";
  } catch (const dist::DistributedError& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  std::vector<Tensor> params{Tensor::zeros({4}, DType::f32).set_requires_grad(true)};
  dist::GradReducer reducer(dist::ProcessGroup::single(), params, {});
  EXPECT_FALSE(reducer.on_gpu());
}

}  // namespace
}  // namespace mantissa
