// The kernel times and FLOP counts behind kernel_times(); see profiler.h.
#include "profiler.h"

#include <map>
#include <mutex>
#include <string>

#include "mantissa/backend/kernel_timer.h"

namespace mantissa::detail {
namespace {

struct Totals {
  std::mutex mutex;
  std::map<std::string, double> family_seconds;
  double matmul_flops = 0;
  double library_seconds = 0;
  long library_calls = 0;
};

Totals& totals() {
  static Totals t;
  return t;
}

thread_local const char* tls_region = nullptr;

}  // namespace

FamilyTimer::FamilyTimer(const char* family) : family_(family), start_(std::chrono::steady_clock::now()) {}

FamilyTimer::~FamilyTimer() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const char* region = current_kernel_region();
  std::lock_guard lock(totals().mutex);
  totals().family_seconds[region != nullptr ? region : family_] += s;
}

void count_matmul_flops(double flops) {
  std::lock_guard lock(totals().mutex);
  totals().matmul_flops += flops;
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
  return KernelTimes{t.library_seconds, t.library_calls, t.family_seconds, t.matmul_flops};
}

void reset_kernel_times() {
  detail::Totals& t = detail::totals();
  std::lock_guard lock(t.mutex);
  t.family_seconds.clear();
  t.matmul_flops = 0;
  t.library_seconds = 0;
  t.library_calls = 0;
}

KernelRegion::KernelRegion(const char* name) : saved_(detail::tls_region) {
  if (detail::tls_region == nullptr) detail::tls_region = name;
}
KernelRegion::~KernelRegion() { detail::tls_region = saved_; }

const char* current_kernel_region() { return detail::tls_region; }

}  // namespace mantissa
