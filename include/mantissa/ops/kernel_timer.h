// Time spent inside library kernels (oneDNN primitives), summed over all calls since the last reset:
// what a step's time breakdown compares the whole step with.
#pragma once

#include <map>
#include <string>

namespace mantissa {

struct KernelTimes {
  double onednn_seconds = 0;  // matmul and convolution primitives, wall time of their execution
  long onednn_calls = 0;
  // Wall time inside the CPU backend's kernels by family ("matmul", "elementwise", "copy", ...),
  // oneDNN's included; what is left of a step is the front-ends, autograd and allocation.
  std::map<std::string, double> backend_seconds;
};

KernelTimes kernel_times();
void reset_kernel_times();

}  // namespace mantissa
