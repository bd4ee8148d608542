// The numerics telemetry's pass on the CPU: blocks converted to f32 in bulk, each value's binary exponent
// read from the bits of its f64 product with the factor, per-block tallies summed in block order.
#include <bit>
#include <cmath>
#include <cstring>

#include "../reference/reference_kernels.h"
#include "cpu_kernels.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

// Adds len values (times factor) to s. For a normal f64 m, floor(log2 m) is its exponent field less 1023.
void tally_block(const float* v, std::int64_t len, double factor, std::span<const double> limits, NumericsStats& s) {
  for (std::int64_t i = 0; i < len; ++i) {
    const double d = static_cast<double>(v[i]) * factor;
    const double m = std::fabs(d);
    const auto bits = std::bit_cast<std::uint64_t>(m);
    const auto field = static_cast<int>(bits >> 52);
    if (field == 0 || field == 0x7ff) {  // zero, inf, NaN (and f64 subnormals, which no f32 times 2^+-30 gives)
      tally_value(d, limits, s);
      continue;
    }
    ++s.count;
    s.amax = std::max(s.amax, m);
    const int bin = std::clamp(field - 1023 - kLog2Lowest, 0, kLog2Bins - 1);
    ++s.log2[static_cast<std::size_t>(bin)];
    for (std::size_t k = 0; k < limits.size(); ++k) s.above[k] += m > limits[k] ? 1 : 0;
  }
}

}  // namespace

NumericsStats cpu_numerics(const Tensor& x, double factor, std::span<const double> limits) {
  if (!x.is_contiguous()) return reference_numerics(x, factor, limits);
  // Chunks of 64 blocks, one tally each; every figure is a count or a maximum, so the order of the sum
  // does not matter.
  constexpr std::int64_t kChunk = 64 * kRowBlock;
  const std::int64_t n = x.numel();
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<NumericsStats> part(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    alignas(64) float buf[kRowBlock];
    NumericsStats& s = part[static_cast<std::size_t>(c)];
    s.above.assign(limits.size(), 0);
    for (std::int64_t at = c * kChunk; at < std::min(n, (c + 1) * kChunk); at += kRowBlock) {
      const std::int64_t len = std::min(kRowBlock, n - at);
      load_f32(x, at, 1, len, buf);
      tally_block(buf, len, factor, limits, s);
    }
  }
  NumericsStats total;
  total.above.assign(limits.size(), 0);
  for (const NumericsStats& s : part) {
    total.count += s.count;
    total.zeros += s.zeros;
    total.nonfinite += s.nonfinite;
    total.amax = std::max(total.amax, s.amax);
    for (std::size_t i = 0; i < total.log2.size(); ++i) total.log2[i] += s.log2[i];
    for (std::size_t k = 0; k < limits.size(); ++k) total.above[k] += s.above[k];
  }
  return total;
}

}  // namespace mantissa::detail
