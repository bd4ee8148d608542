// Where a step's time goes: each kernel run is timed under its family (or the open KernelRegion's name)
// and the matmul and convolution FLOPs are counted, for kernel_times() (mantissa/backend/kernel_timer.h).
// run_kernel (registry.h) times every kernel here, whatever device runs it.
#pragma once

#include <chrono>

namespace mantissa::detail {

// Adds its lifetime to kernel_times().backend_seconds[family], or to the open KernelRegion's entry.
class FamilyTimer {
 public:
  explicit FamilyTimer(const char* family);
  ~FamilyTimer();
  FamilyTimer(const FamilyTimer&) = delete;
  FamilyTimer& operator=(const FamilyTimer&) = delete;

 private:
  const char* family_;
  std::chrono::steady_clock::time_point start_;
};

// Adds to kernel_times().matmul_flops.
void count_matmul_flops(double flops);
// Adds one library primitive's execution (oneDNN's) to kernel_times().onednn_seconds and calls.
void count_library_call(double seconds);

}  // namespace mantissa::detail
