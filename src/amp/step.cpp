// scaled_step: the loss scaler and the optimizer together, in the order that keeps skipped steps exact.
#include "mantissa/amp/step.h"

#include <stdexcept>
#include <vector>

namespace mantissa {

StepReport scaled_step(LossScaler& scaler, Optimizer& optimizer, double max_grad_norm) {
  // Parameters with an f32 master copy are unscaled in f32, in a master gradient (Apex O2).
  std::vector<Tensor> grads;
  for (const Tensor& g : optimizer.step_gradients()) {
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) {
    throw std::logic_error("optimizer step before backward: no parameter has a gradient");
  }
  StepReport r = scaler.unscale(grads);
  if (!r.skipped) {
    if (max_grad_norm > 0) clip_grad_norm(grads, max_grad_norm, r.grad_norm);
    optimizer.step();
  }
  scaler.update();
  return r;
}

}  // namespace mantissa
