// A softmax row's max and sum of exponentials in one read (an online softmax): each GPU thread folds its
// elements into a running (max, sum of exp(x - max)), rescaling the sum when the max grows, and the
// block then rescales every thread's sum to the row's max before adding them. Plain C++ for the host
// and the GPU, so the arithmetic, special values included, is tested against the two-pass definition on
// every machine (tests/unit/online_softmax_test.cpp); cuda_rows.cu's cross-entropy uses it.
#pragma once

#include <cmath>

#include "../../numeric/host_device.h"

namespace mantissa::detail::cuda {

struct OnlineSum {
  float max = -INFINITY;
  float total = 0;  // sum of exp(x - max) over the values folded in
};

// Folds v in. A NaN makes the sum NaN; a -inf adds nothing (exp(-inf - -inf) would be NaN); a +inf
// becomes the max, and the other values then add exp(-inf) = 0.
MANTISSA_HOST_DEVICE inline void online_add(OnlineSum& s, float v) {
  if (v > s.max) {
    s.total = s.total * expf(s.max - v) + 1.0f;
    s.max = v;
  } else if (v != -INFINITY) {
    s.total += expf(v - s.max);
  }
}

// A thread's sum rescaled to the row's max (the largest of the threads' maxima). A thread that folded
// in no finite value has total 0 (nothing to add) or NaN (a NaN, which must reach the row's sum);
// exp(max - row_max) is NaN only where both are +inf, and then the row's sum is NaN, as the definition's
// exp(inf - inf) makes it.
MANTISSA_HOST_DEVICE inline float rescaled_total(const OnlineSum& s, float row_max) {
  return s.total == 0.0f ? 0.0f : s.total * expf(s.max - row_max);
}

}  // namespace mantissa::detail::cuda
