// The numerics telemetry's oracle: each value read as double, classified by the definition (frexp gives
// the binary exponent), one at a time.
#include <cmath>

#include "../../core/element_io.h"
#include "../../core/strided.h"
#include "reference_kernels.h"

namespace mantissa::detail {

void tally_value(double v, std::span<const double> limits, NumericsStats& s) {
  ++s.count;
  if (v == 0) {
    ++s.zeros;
    return;
  }
  if (!std::isfinite(v)) {
    ++s.nonfinite;
    return;
  }
  const double m = std::fabs(v);
  s.amax = std::max(s.amax, m);
  int e = 0;
  std::frexp(m, &e);  // m = f 2^e with f in [0.5, 1): floor(log2 m) = e - 1
  const int bin = std::clamp(e - 1 - kLog2Lowest, 0, kLog2Bins - 1);
  ++s.log2[static_cast<std::size_t>(bin)];
  for (std::size_t i = 0; i < limits.size(); ++i) s.above[i] += m > limits[i] ? 1 : 0;
}

NumericsStats reference_numerics(const Tensor& x, double factor, std::span<const double> limits) {
  NumericsStats s;
  s.above.assign(limits.size(), 0);
  for_each_offset(x.shape(), {x.strides()}, [&](const std::int64_t* o) {
    tally_value(load_element(x.dtype(), x.data(), o[0]) * factor, limits, s);
  });
  return s;
}

}  // namespace mantissa::detail
