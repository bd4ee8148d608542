// One mixed-precision optimizer step, the way PyTorch's scaler.step(optimizer); scaler.update() reads:
// unscale every gradient in one pass, clip by global norm if asked, apply the update unless a gradient
// overflowed (then every parameter, master weight and optimizer state stays bit-identical), and move
// the loss scale.
#pragma once

#include "mantissa/amp/loss_scaler.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa {

// max_grad_norm <= 0: no clipping. Throws std::logic_error if no parameter has a gradient (stepping
// before backward).
StepReport scaled_step(LossScaler& scaler, Optimizer& optimizer, double max_grad_norm = 0);

}  // namespace mantissa
