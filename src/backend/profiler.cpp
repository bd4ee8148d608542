// The kernel times and FLOP counts behind kernel_times(); see profiler.h.
#include "profiler.h"

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "mantissa/backend/kernel_timer.h"

namespace mantissa::detail {
namespace {

struct Totals {
  std::mutex mutex;
  std::map<std::string, double> family_seconds, family_bytes, family_flops;
  double matmul_flops = 0;
  double library_seconds = 0;
  long library_calls = 0;
};

Totals& totals() {
  static Totals t;
  return t;
}

thread_local const char* tls_region = nullptr;

// Registered once per device type (at the backend's registration), read by every kernel call after.
std::array<DeviceKernelClock, 2> clocks;
std::atomic<bool> device_timing{false};
thread_local bool tls_device_timed = false;  // a kernel call on this thread is being timed on its device

}  // namespace

void set_device_kernel_clock(DeviceType type, const DeviceKernelClock& clock) {
  clocks.at(static_cast<std::size_t>(type)) = clock;
}

FamilyTimer::FamilyTimer(const char* family, Device device, double bytes, double flops)
    : name_(current_kernel_region() != nullptr ? current_kernel_region() : family), bytes_(bytes), flops_(flops), clock_(nullptr) {
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
  totals().family_seconds[name_] += s;
  totals().family_bytes[name_] += bytes_;
  if (flops_ > 0) {
    totals().family_flops[name_] += flops_;
    totals().matmul_flops += flops_;
  }
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
  return KernelTimes{t.library_seconds, t.library_calls, t.family_seconds, t.family_bytes, t.family_flops, t.matmul_flops};
}

void reset_kernel_times() {
  (void)device_kernel_seconds();
  detail::Totals& t = detail::totals();
  std::lock_guard lock(t.mutex);
  t.family_seconds.clear();
  t.family_bytes.clear();
  t.family_flops.clear();
  t.matmul_flops = 0;
  t.library_seconds = 0;
  t.library_calls = 0;
}

void set_device_kernel_timing(bool on) { detail::device_timing = on; }
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
