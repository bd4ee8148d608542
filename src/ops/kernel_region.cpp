// The thread's open KernelRegion: which part of a step (e.g. "attention") its kernels are counted under.
#include "mantissa/ops/kernel_timer.h"

namespace mantissa {
namespace {
thread_local const char* tls_region = nullptr;
}  // namespace

KernelRegion::KernelRegion(const char* name) : saved_(tls_region) {
  if (tls_region == nullptr) tls_region = name;
}
KernelRegion::~KernelRegion() { tls_region = saved_; }

const char* current_kernel_region() { return tls_region; }

}  // namespace mantissa
