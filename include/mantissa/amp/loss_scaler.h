// Loss scaling: multiplies the loss so that small fp16 gradients do not flush to zero, then divides the
// gradients back in one fused pass that also finds overflow; a step with any inf or NaN is skipped.
//
// Dynamic scaling follows PyTorch's GradScaler exactly, defaults included (initial scale 2^16, growth 2
// after 2000 good steps in a row, backoff 0.5 on overflow, growth that would reach infinity ignored, no
// floor, no ceiling, no hysteresis). Options add what users of fp16 ask for: DeepSpeed's hysteresis
// (tolerate N - 1 overflows before backing off; re-armed when the scale grows), a floor and a ceiling,
// and a clear report when the scale sits at its floor (or at 1 or below) and keeps overflowing.
// LossScalerOptions::deepspeed() gives DeepSpeed's DynamicLossScaler with its defaults.
//
//   scaler.scale_loss(loss).backward();
//   const StepReport r = scaler.unscale(gradients);    // once per step, after the last micro-batch
//   if (!r.skipped) { clip_grad_norm(...); optimizer.step(); }
//   scaler.update();
// or, fused (what scaled_step() does): r = scaler.check(gradients); optimizer.step(clip / scale); update().
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "mantissa/base/errors.h"
#include "mantissa/base/value_range.h"
#include "mantissa/core/batched_reads.h"
#include "mantissa/core/tensor.h"

namespace mantissa {

enum class LossScaling : std::uint8_t {
  none,     // scale 1; overflowing steps are still found and skipped
  fixed,    // a constant scale (Apex's static scaling)
  dynamic,  // grows after good runs, backs off on overflow
};

// The allowed values of the scaler's settings and of a resumed scale, by what they mean: one declaration
// each, which LossScaler, the checkpoint reader and the command's flags (--init-scale, --min-scale,
// --growth-factor, --backoff-factor; mantissa/train/setting_ranges.h) all check against.
namespace loss_scale_ranges {
inline constexpr double kF32Min = std::numeric_limits<float>::min(), kF32Max = std::numeric_limits<float>::max();
// Scales multiply f32 losses and divide f32 gradients: a normal f32 (1e-300 would be 0).
inline constexpr ValueRange kScale{kF32Min, kF32Max, false, false, false,
                                   "a positive normal f32 number (1.17549435e-38 .. 3.40282347e+38)"};
inline constexpr ValueRange kMinScale{kF32Min, kF32Max, false, false, true,
                                      "0 (no floor) or a positive normal f32 number (1.17549435e-38 .. 3.40282347e+38)"};
inline constexpr ValueRange kGrowthFactor{1, 0x1p16, true, false, false, "above 1 and at most 65536"};
// Below 2^-24 one backoff takes fp16's largest scale under its smallest gradient.
inline constexpr ValueRange kBackoffFactor{0x1p-24, 1, false, true, false, "in [2^-24, 1)"};
}  // namespace loss_scale_ranges

struct LossScalerOptions {
  LossScaling kind = LossScaling::dynamic;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  // DeepSpeed's hysteresis ("delayed shift"): an overflow backs off only when the hysteresis left is 1,
  // and otherwise uses one up; the scale growing re-arms it (or every good step, with
  // consecutive_hysteresis). 1 backs off on each overflow (PyTorch); DeepSpeed's default is 2.
  int hysteresis = 1;
  bool consecutive_hysteresis = false;
  // The scale never goes below the floor nor above the ceiling. PyTorch has neither (0 and infinity, the
  // defaults), and its scale can collapse to tiny values; DeepSpeed's floor is 1.
  double min_scale = 0.0;
  double max_scale = std::numeric_limits<double>::infinity();
  // Overflowing steps in a row at the floor (or at a scale of 1 or below, where a scale no longer helps)
  // before the report says the scale has collapsed.
  int floor_patience = 8;
  // Throw LossScaleCollapse then, instead of reporting a warning.
  bool error_on_collapse = false;
  // The format the gradients would be computed in, for the underflow telemetry.
  DType compute = DType::f16;

  // The defaults users expect per compute dtype: dynamic for f16, none for bf16 (fp32's range) and f32.
  static LossScalerOptions for_compute(DType compute);
  // DeepSpeed's DynamicLossScaler with its defaults: initial 2^16 (initial_scale_power 16), growth 2
  // after 1000 good steps (loss_scale_window), backoff 0.5, hysteresis 2, floor 1 (min_loss_scale).
  static LossScalerOptions deepspeed();
};

// What unscale() found, for the step's telemetry.
struct StepReport {
  double scale = 1;                  // the scale the step's gradients carried
  bool skipped = false;              // some gradient value was inf or NaN
  std::int64_t nonfinite = 0;        // how many
  double underflow_fraction = 0;     // of gradient values that would flush to zero in `compute` unscaled
  double grad_norm = 0;              // global L2 norm of the unscaled gradients (finite values)
  std::string warning;               // non-empty when the scale has collapsed to its floor
};

// Everything needed to resume exactly.
struct LossScalerState {
  double scale = 1;
  std::int64_t growth_tracker = 0;  // good steps since the last change
  int hysteresis_left = 1;
  int floor_overflows = 0;          // overflowing steps in a row at the floor
  std::int64_t steps = 0;
  std::int64_t skipped = 0;
  friend bool operator==(const LossScalerState&, const LossScalerState&) = default;
};

class LossScaleCollapse : public Error {
 public:
  using Error::Error;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return state_.scale; }
  const LossScalerOptions& options() const { return options_; }

  // loss * scale, in f32 (f64 for f64): what backward() is called on.
  Tensor scale_loss(const Tensor& loss) const;

  // The fused pass over every gradient, in place: divides by the scale, counts non-finite values and
  // values that would underflow, and computes the global norm. Call once per step; throws if called
  // twice before update(), or if a gradient is missing (stepping before backward).
  StepReport unscale(std::span<const Tensor> gradients);
  // The same pass reading only: the gradients stay scaled, and the report (non-finite values, underflow,
  // the norm of the unscaled values) is the same. For an optimizer that unscales inside its update
  // (Optimizer::step(1 / scale)): one pass over the gradients fewer. Counts as this step's unscale().
  // reads: the step's batched reads, or null: the pass's totals are read with the values they hold
  // (reads->read() is called here), so a step on a GPU waits once for its losses, counts and check.
  StepReport check(std::span<const Tensor> gradients, BatchedReads* reads = nullptr);

  // For a step stopped before its gradients were complete (the non-finite tracer found an inf or NaN):
  // counts as this step's unscale(), finding `nonfinite` non-finite values.
  StepReport record_overflow(std::int64_t nonfinite);

  // Records the step's outcome (from unscale) and moves the scale. Throws if unscale was not called.
  void update();

  const LossScalerState& state() const { return state_; }
  void load_state(const LossScalerState& state);

 private:
  StepReport examine(std::span<const Tensor> gradients, bool in_place, BatchedReads* reads);
  // Marks the step examined and adds the collapse report (or throws LossScaleCollapse).
  void finish(StepReport& r);
  // Whether the scale is at its floor, or at 1 or below (where scaling no longer keeps anything).
  bool at_floor() const;
  LossScalerOptions options_;
  LossScalerState state_;
  bool unscaled_ = false;
  bool last_overflow_ = false;
};

// Scales every gradient by max_norm / norm when their global norm exceeds max_norm (norm: from the
// step's report, or computed when negative). Returns the factor applied (1 when none).
double clip_grad_norm(std::span<const Tensor> gradients, double max_norm, double norm = -1);

}  // namespace mantissa
