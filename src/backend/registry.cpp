// Which implementation runs a device's kernels, and the one-time registration of every backend's.
#include "registry.h"

#include <atomic>

#include "mantissa/backend/backend_select.h"

namespace mantissa {
namespace {
thread_local CpuBackend tls_cpu_backend = CpuBackend::onednn;
}  // namespace

CpuBackend cpu_backend_kind() { return tls_cpu_backend; }
void set_cpu_backend(CpuBackend kind) { tls_cpu_backend = kind; }

namespace detail {

const char* impl_name(Impl impl) {
  switch (impl) {
    case Impl::reference: return "reference";
    case Impl::cpu: return "cpu";
    case Impl::cuda: return "cuda";
  }
  return "?";
}

namespace {
std::atomic<bool> g_cpu_kernels_for_gpu_tensors{false};
}  // namespace

bool set_cpu_kernels_for_gpu_tensors(bool on) { return g_cpu_kernels_for_gpu_tensors.exchange(on); }

Impl impl_for(Device device) {
  static const bool registered = [] {
    register_reference_kernels();
    register_cpu_kernels();
#ifdef MANTISSA_WITH_CUDA
    register_cuda_kernels();
#endif
    return true;
  }();
  (void)registered;
  if (device.type == DeviceType::cpu) return tls_cpu_backend == CpuBackend::reference ? Impl::reference : Impl::cpu;
  if (g_cpu_kernels_for_gpu_tensors.load(std::memory_order_relaxed)) return Impl::cpu;
  return Impl::cuda;
}

void throw_device_mismatch(const char* kernel, Device expected, Device found) {
  throw std::invalid_argument(std::string(kernel) + ": a tensor on " + found.str() + " where " + expected.str() +
                              " was expected; move tensors with to_device() first");
}

void throw_missing_kernel(const char* kernel, Device device, Impl impl) {
  throw std::runtime_error(std::string(kernel) + ": no kernel for device " + device.str() + " (" + impl_name(impl) +
                           ") in this build");
}

}  // namespace detail
}  // namespace mantissa
