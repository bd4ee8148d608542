// The GPU's own clock around kernels, for the step breakdown (mantissa/backend/kernel_timer.h): a kernel
// call queues its work and returns, so host time counts launches; here an event pair on the stream brackets
// each outermost kernel call while device kernel timing is on, and collect() adds up the elapsed times
// once the GPU has run them. Events are reused across collections.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../profiler.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"

namespace mantissa::detail::cuda {
namespace {

struct Timed {
  const char* name;
  cudaEvent_t start, stop;
};

struct Clock {
  std::mutex mutex;
  std::vector<Timed> timed;
  bool open = false;  // begun, not ended
  std::vector<cudaEvent_t> spare;

  cudaEvent_t take() {
    if (!spare.empty()) {
      const cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "kernel timing");
    return e;
  }
};

Clock& clock() {
  static Clock c;
  return c;
}

void begin(const char* name) {
  Clock& c = clock();
  std::lock_guard lock(c.mutex);
  const Timed t{name, c.take(), c.take()};
  c.timed.push_back(t);
  check(cudaEventRecord(t.start, stream()), "kernel timing");
  c.open = true;
}

void end() {
  Clock& c = clock();
  std::lock_guard lock(c.mutex);
  if (!c.open) return;
  c.open = false;
  // Not thrown from here (a destructor): a failed record leaves the pair unfinished, which collect()
  // reports.
  (void)cudaEventRecord(c.timed.back().stop, stream());
}

std::map<std::string, double> collect() {
  Clock& c = clock();
  std::lock_guard lock(c.mutex);
  std::map<std::string, double> seconds;
  if (c.timed.empty() || c.open) return seconds;  // nothing timed (a GPU-less machine), or mid-kernel
  cudaError_t status = wait_for_event_status(c.timed.back().stop);
  for (const Timed& t : c.timed) {
    float ms = 0;
    if (status == cudaSuccess) status = cudaEventElapsedTime(&ms, t.start, t.stop);
    seconds[t.name] += ms / 1e3;
    c.spare.push_back(t.start);
    c.spare.push_back(t.stop);
  }
  c.timed.clear();
  check(status, "kernel timing");
  return seconds;
}

}  // namespace

DeviceKernelClock kernel_clock() { return {begin, end, collect}; }

}  // namespace mantissa::detail::cuda
