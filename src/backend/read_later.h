// Kernels whose totals the host needs (a quantizer's counts, the loss scaler's check) can leave them in
// device memory instead of returning them, for the caller to read later with a step's other values, in
// one wait (core/batched_reads.h); the layouts are kernels.h's (Fp8Counts, CheckTotals). One home for
// checking such a place, and for filling it on the backends whose memory is the host's.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels.h"

namespace mantissa::detail {

// `place`: undefined (the totals are returned), or sizeof(T) contiguous bytes on `device`.
template <class T>
void check_place(const char* kernel, const Tensor& place, Device device) {
  if (!place.defined()) return;
  if (!place.is_contiguous() || place.numel() * static_cast<std::int64_t>(dtype_size(place.dtype())) != static_cast<std::int64_t>(sizeof(T)) ||
      !(place.device() == device)) {
    throw std::invalid_argument(std::string(kernel) + ": the place for its totals is " + std::to_string(sizeof(T)) +
                                " contiguous bytes on " + device.str());
  }
}

// `value` written into `place` (host memory: the CPU's and the reference's kernels).
template <class T>
void leave_in(const Tensor& place, const T& value) {
  std::memcpy(place.data(), &value, sizeof value);
}

// On backends on host memory (the CPU, the reference): a quantizer's stats left in `counts` where the
// caller gave some, and only count and tensor_scale returned, as the GPU's kernels leave them.
inline Fp8QuantizeStats leave_counts(const Fp8QuantizeStats& st, const Tensor& counts) {
  if (!counts.defined()) return st;
  leave_in(counts, counts_of(st));
  return {.count = st.count, .tensor_scale = st.tensor_scale};
}

// BlockQuantize's set_factor (fit_quantize.h) on host memory: 1 / scale[0] in f64, or `value`.
inline void set_factor_on_host(const Tensor& factor, const Tensor& scale, double value) {
  leave_in(factor, scale.defined() ? 1.0 / static_cast<double>(*scale.data_as<float>()) : value);
}

// A microscaled quantizer's stats on host memory: its tensor scale left in `factor` where the caller
// gave one (and returned as 1), as the GPU's kernels leave it.
inline Fp8QuantizeStats leave_factor(Fp8QuantizeStats st, const Tensor& factor) {
  if (!factor.defined()) return st;
  leave_in(factor, st.tensor_scale);
  st.tensor_scale = 1;
  return st;
}

// What a scaled product multiplies by (ProductScale) on host memory: alpha times each factor, in f64.
inline double product_scale_on_host(const ProductScale& s) {
  double v = s.alpha;
  for (const Tensor* f : {&s.a_factor, &s.w_factor}) {
    if (!f->defined()) continue;
    double factor;
    std::memcpy(&factor, f->data(), sizeof factor);
    v *= factor;
  }
  return v;
}

// Likewise the loss scaler's check, left in `totals` where given (only count returned).
inline GradientCheck leave_check(const GradientCheck& c, const Tensor& totals) {
  if (!totals.defined()) return c;
  leave_in(totals, CheckTotals{.nonfinite = static_cast<std::uint64_t>(c.nonfinite),
                               .underflow = static_cast<std::uint64_t>(c.underflow), .sum_squares = c.sum_squares});
  return {.count = c.count};
}

}  // namespace mantissa::detail
