// The kernel times and FLOP counts behind kernel_times(); see profiler.h.
#include "profiler.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "mantissa/backend/kernel_timer.h"

namespace mantissa::detail {
namespace {

// One family's or region's totals: one map lookup per kernel call.
struct Part {
  double seconds = 0, bytes = 0, flops = 0;
};

struct Totals {
  std::mutex mutex;
  std::map<std::string, Part> parts;
  double library_seconds = 0;
  long library_calls = 0;
};

Totals& totals() {
  static Totals t;
  return t;
}

thread_local const char* tls_region = nullptr;

// -1: not yet read from the environment (MANTISSA_KERNEL_TIMES), else 0 (by family) or 1 (by kernel).
std::atomic<int> times_by_kernel{-1};

bool by_kernel() {
  int v = times_by_kernel.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("MANTISSA_KERNEL_TIMES");
    const std::string s = env != nullptr ? env : "";
    if (s != "" && s != "family" && s != "kernel") {
      throw std::invalid_argument("MANTISSA_KERNEL_TIMES: '" + s + "' is neither 'family' nor 'kernel'");
    }
    v = s == "kernel" ? 1 : 0;
    times_by_kernel.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// Registered once per device type (at the backend's registration), read by every kernel call after.
std::array<DeviceKernelClock, 2> clocks;
std::atomic<bool> device_timing{false};
thread_local bool tls_device_timed = false;  // a kernel call on this thread is being timed on its device

}  // namespace

void set_device_kernel_clock(DeviceType type, const DeviceKernelClock& clock) {
  clocks.at(static_cast<std::size_t>(type)) = clock;
}

FamilyTimer::FamilyTimer(const char* family, const char* kernel, Device device, double bytes, double flops)
    : name_(current_kernel_region() != nullptr ? current_kernel_region() : by_kernel() ? kernel : family),
      bytes_(bytes),
      flops_(flops),
      clock_(nullptr) {
  // Only the outermost kernel call of a thread is timed: a kernel's own kernels are part of its time.
  if (device_timing.load(std::memory_order_relaxed) && !tls_device_timed) {
    const DeviceKernelClock& c = clocks.at(static_cast<std::size_t>(device.type));
    if (c.begin != nullptr) {
      c.begin(name_);
      clock_ = &c;
      tls_device_timed = true;
    }
  }
  start_ = std::chrono::steady_clock::now();
}

FamilyTimer::~FamilyTimer() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (clock_ != nullptr) {
    clock_->end();
    tls_device_timed = false;
  }
  std::lock_guard lock(totals().mutex);
  Part& part = totals().parts[name_];
  part.seconds += s;
  part.bytes += bytes_;
  part.flops += flops_;
}

void count_library_call(double seconds) {
  std::lock_guard lock(totals().mutex);
  totals().library_seconds += seconds;
  ++totals().library_calls;
}

}  // namespace mantissa::detail

namespace mantissa {

KernelTimes kernel_times() {
  detail::Totals& t = detail::totals();
  std::lock_guard lock(t.mutex);
  KernelTimes k{t.library_seconds, t.library_calls, {}, {}, {}, 0};
  for (const auto& [name, part] : t.parts) {
    k.backend_seconds[name] = part.seconds;
    k.backend_bytes[name] = part.bytes;
    if (part.flops > 0) {
      k.backend_flops[name] = part.flops;
      k.matmul_flops += part.flops;
    }
  }
  return k;
}

void reset_kernel_times() {
  (void)device_kernel_seconds();
  detail::Totals& t = detail::totals();
  std::lock_guard lock(t.mutex);
  t.parts.clear();
  t.library_seconds = 0;
  t.library_calls = 0;
}

void set_device_kernel_timing(bool on) { detail::device_timing = on; }
void set_kernel_times_by_kernel(bool on) { detail::times_by_kernel = on ? 1 : 0; }
bool device_kernel_timing() { return detail::device_timing; }

std::map<std::string, double> device_kernel_seconds() {
  std::map<std::string, double> all;
  for (const detail::DeviceKernelClock& c : detail::clocks) {
    if (c.collect == nullptr) continue;
    for (const auto& [name, s] : c.collect()) all[name] += s;
  }
  return all;
}

KernelRegion::KernelRegion(const char* name) : saved_(detail::tls_region) {
  if (detail::tls_region == nullptr) detail::tls_region = name;
}
KernelRegion::~KernelRegion() { detail::tls_region = saved_; }

const char* current_kernel_region() { return detail::tls_region; }

}  // namespace mantissa
