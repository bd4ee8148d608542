// The numerics telemetry on the GPU (what the non-finite tracer and the per-layer statistics read): each
// value times the factor in f64, classified by the definition of reference_numerics.cpp (zero, not
// finite, else its binary exponent's bin and whether it passes each limit). A block tallies its
// histogram in shared memory and adds it into the device's totals, which are read back once.
#include <cstring>

#include "cuda_kernels.h"
#include "cuda_support.cuh"

namespace mantissa::detail::cuda {
namespace {

constexpr int kMaxLimits = 16;

struct Limits {
  double v[kMaxLimits];
  int n;
};

struct Totals {
  unsigned long long zeros, nonfinite, amax;  // amax: a non-negative double's pattern (ordered as the values)
  unsigned long long log2[kLog2Bins];
  unsigned long long above[kMaxLimits];
};

__global__ void numerics_kernel(Strided<1> it, std::int64_t n, ElementType tx, const void* x, double factor, Limits limits,
                                Totals* totals) {
  __shared__ unsigned long long hist[kLog2Bins];
  __shared__ unsigned long long above[kMaxLimits];
  for (int k = threadIdx.x; k < kLog2Bins; k += blockDim.x) hist[k] = 0;
  if (threadIdx.x < kMaxLimits) above[threadIdx.x] = 0;
  __syncthreads();
  unsigned long long zeros = 0, nonfinite = 0;
  double amax = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t off[1];
    it.offsets(i, off);
    const double v = static_cast<double>(load(tx, x, off[0])) * factor;
    if (v == 0) {
      ++zeros;
    } else if (!isfinite(v)) {
      ++nonfinite;
    } else {
      const double m = fabs(v);
      amax = fmax(amax, m);
      int e = 0;
      frexp(m, &e);  // m = f 2^e with f in [0.5, 1): floor(log2 m) = e - 1
      const int bin = min(max(e - 1 - kLog2Lowest, 0), kLog2Bins - 1);
      atomicAdd(&hist[bin], 1ULL);
      for (int l = 0; l < limits.n; ++l) {
        if (m > limits.v[l]) atomicAdd(&above[l], 1ULL);
      }
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < kLog2Bins; k += blockDim.x) {
    if (hist[k] != 0) atomicAdd(&totals->log2[k], hist[k]);
  }
  if (threadIdx.x < limits.n && above[threadIdx.x] != 0) atomicAdd(&totals->above[threadIdx.x], above[threadIdx.x]);
  if (zeros != 0) atomicAdd(&totals->zeros, zeros);
  if (nonfinite != 0) atomicAdd(&totals->nonfinite, nonfinite);
  if (amax > 0) atomicMax(&totals->amax, static_cast<unsigned long long>(__double_as_longlong(amax)));
}

}  // namespace

NumericsStats numerics(const Tensor& x, double factor, std::span<const double> limits) {
  refuse_f64("numerics", x);
  if (limits.size() > static_cast<std::size_t>(kMaxLimits)) {
    throw std::invalid_argument("numerics: at most " + std::to_string(kMaxLimits) + " limits on cuda");
  }
  NumericsStats s;
  s.count = x.numel();
  s.above.assign(limits.size(), 0);
  if (x.numel() == 0) return s;
  Limits l{};
  l.n = static_cast<int>(limits.size());
  for (std::size_t i = 0; i < limits.size(); ++i) l.v[i] = limits[i];
  const DeviceTotals<Totals> totals(x.device());
  const Tensor* ts[1] = {&x};
  numerics_kernel<<<blocks_for(x.numel()), kThreads, 0, stream()>>>(strided(x.shape(), ts, "numerics"), x.numel(),
                                                                     element_type(x.dtype()), x.data(), factor, l,
                                                                     totals.get());
  check_launch("numerics");
  const Totals host = totals.read();
  s.zeros = static_cast<std::int64_t>(host.zeros);
  s.nonfinite = static_cast<std::int64_t>(host.nonfinite);
  std::memcpy(&s.amax, &host.amax, sizeof s.amax);
  for (int k = 0; k < kLog2Bins; ++k) s.log2[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(host.log2[k]);
  for (std::size_t i = 0; i < limits.size(); ++i) s.above[i] = static_cast<std::int64_t>(host.above[i]);
  return s;
}

}  // namespace mantissa::detail::cuda
