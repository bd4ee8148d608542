// The CPU backend's optimizer updates for one element, in the form its f32 loops vectorize (Adam's bias
// corrections folded into the step size and the denominator). PyTorch's algorithms (torch.optim.SGD,
// Adam, AdamW without amsgrad). The reference backend writes the same algorithms its own way, from the
// textbook formulas, so that a mistake here shows up in the parity tests. The CUDA backend compiles the
// same functions for the GPU (MANTISSA_HOST_DEVICE).
#pragma once

#include <cmath>

#include "../../numeric/host_device.h"
#include "../kernels.h"

namespace mantissa::detail {

// Returns the new parameter; updates the momentum buffer in place (first: it starts as this gradient).
template <class T>
MANTISSA_HOST_DEVICE inline T sgd_element(T p, T g, T& buf, const SgdStep& s, bool first) {
  T d = g + static_cast<T>(s.weight_decay) * p;
  if (s.momentum != 0) {
    buf = first ? d : static_cast<T>(s.momentum) * buf + d;
    d = s.nesterov ? d + static_cast<T>(s.momentum) * buf : buf;
  }
  return p - static_cast<T>(s.lr) * d;
}

// Returns the new parameter; updates the moments in place.
template <class T>
MANTISSA_HOST_DEVICE inline T adam_element(T p, T g, T& m, T& v, const AdamStep& s, T bias1, T bias2_sqrt) {
  if (s.decoupled) {
    p *= T(1) - static_cast<T>(s.lr * s.weight_decay);
  } else {
    g += static_cast<T>(s.weight_decay) * p;
  }
  m = static_cast<T>(s.beta1) * m + static_cast<T>(1 - s.beta1) * g;
  v = static_cast<T>(s.beta2) * v + static_cast<T>(1 - s.beta2) * g * g;
  const T denom = std::sqrt(v) / bias2_sqrt + static_cast<T>(s.eps);
  return p - static_cast<T>(s.lr) / bias1 * m / denom;
}

}  // namespace mantissa::detail
