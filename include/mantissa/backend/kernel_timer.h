// Time spent inside library kernels (oneDNN primitives), summed over all calls since the last reset:
// what a step's time breakdown compares the whole step with. Kernels called inside a KernelRegion (and
// in the backward of the ops recorded inside it) count under the region's name instead of their family,
// so that a composite such as attention shows as one part of the step.
#pragma once

#include <map>
#include <string>

namespace mantissa {

struct KernelTimes {
  double onednn_seconds = 0;  // matmul and convolution primitives, wall time of their execution
  long onednn_calls = 0;
  // Wall time inside the CPU backend's kernels by family ("matmul", "elementwise", "cast", ...) or
  // region ("attention"), oneDNN's included; what is left of a step is the front-ends, autograd and
  // allocation.
  std::map<std::string, double> backend_seconds;
  // By the same names: the bytes the kernels' tensors hold (each tensor argument once, the ones a kernel
  // updates in place twice; a broadcast view counts the values it really has), the least memory traffic
  // a kernel can have; and the FLOPs of the products among them.
  std::map<std::string, double> backend_bytes, backend_flops;
  // Floating-point operations of the matmuls and convolutions run (a multiply-add counts two).
  double matmul_flops = 0;
};

KernelTimes kernel_times();
// Clears kernel_times() and device_kernel_seconds().
void reset_kernel_times();

// Names the part of a step that the kernels run in its lifetime belong to (nested: the outermost wins).
class KernelRegion {
 public:
  explicit KernelRegion(const char* name);
  ~KernelRegion();
  KernelRegion(const KernelRegion&) = delete;
  KernelRegion& operator=(const KernelRegion&) = delete;

 private:
  const char* saved_;
};

// Times counted by family (the default) or by each kernel's own name ("layer_norm_backward",
// "adam_update", ...), for a finer breakdown; a region still wins. The default comes from the
// environment, read once: MANTISSA_KERNEL_TIMES=kernel or =family (anything else is an error at the
// first kernel call).
void set_kernel_times_by_kernel(bool on);

// The region open on this thread, or null.
const char* current_kernel_region();

// A GPU queues kernels and returns at once, so the wall time above counts launches, not work. While
// device kernel timing is on, each kernel on such a device is timed on the device itself (a CUDA event
// before and after), under its family or region as above. Off by default: two events a kernel cost the
// host time, so time the steps apart from the steps whose breakdown is wanted.
void set_device_kernel_timing(bool on);
bool device_kernel_timing();
// Seconds on the device by family or region since the last call (or reset_kernel_times()), which it
// clears; waits for the device. Empty where no device times its kernels (a CPU-only build).
std::map<std::string, double> device_kernel_seconds();

}  // namespace mantissa
