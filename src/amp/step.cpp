// scaled_step: the loss scaler and the optimizer together, in the order that keeps skipped steps exact,
// with the unscale and the clipping fused into the optimizer's update.
#include "mantissa/amp/step.h"

#include <stdexcept>
#include <vector>

namespace mantissa {

StepReport scaled_step(LossScaler& scaler, Optimizer& optimizer, double max_grad_norm, BatchedReads* reads) {
  std::vector<Tensor> grads;
  for (const Tensor& g : optimizer.gradients()) {
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) {
    throw std::logic_error("optimizer step before backward: no parameter has a gradient");
  }
  // One read-only pass: inf/NaN, underflow, the unscaled norm. The gradients stay scaled in their dtype.
  StepReport r = scaler.check(grads, reads);
  if (!r.skipped) {
    // The update multiplies each gradient by this in f32 as it reads it: the unscale (Apex O2's f32
    // master-gradient precision, without the copy) and the clipping (as clip_grad_norm computes it).
    double grad_scale = 1.0 / r.scale;
    if (max_grad_norm > 0 && r.grad_norm > max_grad_norm) grad_scale *= max_grad_norm / (r.grad_norm + 1e-6);
    optimizer.step(grad_scale);
  }
  scaler.update();
  return r;
}

}  // namespace mantissa
