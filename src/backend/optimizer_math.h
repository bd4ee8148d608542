// The optimizer updates for one element, as templates over the compute type: the reference backend
// runs them in double, the CPU backend in float over blocks. PyTorch's algorithms (torch.optim.SGD,
// Adam, AdamW without amsgrad), written once.
#pragma once

#include <cmath>

#include "backend.h"

namespace mantissa::detail {

// Returns the new parameter; updates the momentum buffer in place.
template <class T>
inline T sgd_element(T p, T g, T& buf, const SgdStep& s) {
  T d = g + static_cast<T>(s.weight_decay) * p;
  if (s.momentum != 0) {
    buf = s.first ? d : static_cast<T>(s.momentum) * buf + d;
    d = s.nesterov ? d + static_cast<T>(s.momentum) * buf : buf;
  }
  return p - static_cast<T>(s.lr) * d;
}

// Returns the new parameter; updates the moments in place.
template <class T>
inline T adam_element(T p, T g, T& m, T& v, const AdamStep& s, T bias1, T bias2_sqrt) {
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
