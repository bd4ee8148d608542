// The rate at which a device copies memory, measured in the same process as the figures compared with
// it: the kernels that do little arithmetic per byte (norms, elementwise, the optimizer, the loss
// scaler's check) are judged by the bytes they move per second against it.
#pragma once

#include "mantissa/core/device.h"

namespace mantissa::cli {

// Bytes read plus bytes written per second by a plain copy of 256 MiB on `device` (past every cache):
// on the CPU a memcpy split over `threads` threads, on a GPU the device's own copy. Median of 5 runs
// after one that touches the pages.
double copy_bytes_per_second(Device device, int threads);

}  // namespace mantissa::cli
