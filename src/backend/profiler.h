// Where a step's time goes: each kernel run is timed under its family (or the open KernelRegion's name),
// with the bytes its tensors hold and the FLOPs of the products, for kernel_times()
// (mantissa/backend/kernel_timer.h). run_kernel (registry.h) times every kernel here, whatever device
// runs it.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "mantissa/core/device.h"

namespace mantissa::detail {

// A device's own clock around kernels (the CUDA backend's: events on its stream), registered with
// set_device_kernel_clock and used while set_device_kernel_timing(true). begin() is called as a kernel
// is about to be queued, with its family or region, end() after it was; only a thread's outermost kernel
// call is timed (not the kernels it runs itself). collect() returns the seconds by name since its last
// call, waiting for the device.
struct DeviceKernelClock {
  void (*begin)(const char* name) = nullptr;
  void (*end)() = nullptr;
  std::map<std::string, double> (*collect)() = nullptr;
};
void set_device_kernel_clock(DeviceType type, const DeviceKernelClock& clock);

// Adds its lifetime to kernel_times().backend_seconds[family] (or [kernel], when times are counted by
// kernel: set_kernel_times_by_kernel), or to the open KernelRegion's entry, and
// the kernel's bytes and FLOPs to that entry's backend_bytes and backend_flops (and the FLOPs to
// matmul_flops); with device kernel timing on, also runs the device's clock around it.
class FamilyTimer {
 public:
  FamilyTimer(const char* family, const char* kernel, Device device, double bytes, double flops);
  ~FamilyTimer();
  FamilyTimer(const FamilyTimer&) = delete;
  FamilyTimer& operator=(const FamilyTimer&) = delete;

 private:
  const char* name_;  // the family, or the open region
  double bytes_, flops_;
  const DeviceKernelClock* clock_;
  std::chrono::steady_clock::time_point start_;
};

// Adds one library primitive's execution (oneDNN's) to kernel_times().onednn_seconds and calls.
void count_library_call(double seconds);

}  // namespace mantissa::detail
