// One mixed-precision optimizer step, the way PyTorch's scaler.step(optimizer); scaler.update() reads:
// check every gradient in one read-only pass (inf/NaN, the global norm), apply the update unless a
// gradient overflowed (then every parameter, master weight and optimizer state stays bit-identical) with
// the unscale and the global-norm clipping done inside it (in f32, as each gradient is read), and move the
// loss scale. The parameters' gradients are left as backward made them (scaled); zero_grad() clears them.
#pragma once

#include "mantissa/amp/loss_scaler.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa {

// max_grad_norm <= 0: no clipping. Throws std::logic_error if no parameter has a gradient (stepping
// before backward). reads: the step's batched reads (LossScaler::check), or null.
StepReport scaled_step(LossScaler& scaler, Optimizer& optimizer, double max_grad_norm = 0, BatchedReads* reads = nullptr);

}  // namespace mantissa
