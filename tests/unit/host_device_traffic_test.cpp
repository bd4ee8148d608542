// The count of host <-> device copies and host waits (storage.h: host_device_traffic), checked without a
// GPU: a fake device allocator on host memory stands in for the GPU's, and the counts must follow what
// crosses. A tensor filled with one value is made where it lives (no copy, no wait): the loss
// gradient's seed and the ones of a bias gradient are such tensors. And the mechanism's other half:
// every wait and every copy to the host in the CUDA backend's sources goes through the runtime file that
// counts them, which a scan of the sources checks.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "mantissa/core/storage.h"
#include "mantissa/core/tensor.h"
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
