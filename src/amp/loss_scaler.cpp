// The loss scaler's bookkeeping. The gradient pass itself is a backend kernel (scale_and_check), so it
// runs wherever the gradients live.
#include "mantissa/amp/loss_scaler.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../backend/registry.h"
#include "mantissa/autograd/node.h"
#include "mantissa/core/batched_reads.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

// The scale_and_check pass over every gradient: one kernel call per device (in practice one), so a
// device backend reads its totals back once a step. With the step's batched reads, the totals on their
// device are left for them and read with the step's other values (one wait for all).
detail::GradientCheck scale_and_check_all(std::span<const Tensor> gradients, double factor, double below, BatchedReads* reads) {
  detail::GradientCheck total;
  detail::CheckTotals later;
  detail::for_each_device(gradients, [](const Tensor& g) { return g.device(); },
                          [&](Device device, std::span<const Tensor> group) {
                            Tensor left;
                            if (reads != nullptr && reads->device() == device) {
                              left = reads->slot(sizeof later, [&later](std::span<const std::byte> bytes) {
                                std::memcpy(&later, bytes.data(), sizeof later);
                              });
                            }
                            total += detail::run_kernel<detail::kernel::ScaleAndCheck>(device, group, factor, below, left);
                          });
  if (reads != nullptr) {
    reads->read();
    total += detail::check_of(later, 0);
  }
  return total;
}

}  // namespace

LossScalerOptions LossScalerOptions::for_compute(DType compute) {
  LossScalerOptions o;
  o.compute = compute;
  o.kind = compute == DType::f16 ? LossScaling::dynamic : LossScaling::none;
  return o;
}

LossScalerOptions LossScalerOptions::deepspeed() {
  LossScalerOptions o;
  o.kind = LossScaling::dynamic;
  o.init_scale = 65536.0;
  o.growth_interval = 1000;
  o.hysteresis = 2;
  o.min_scale = 1.0;
  return o;
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  // The ranges the command's flags are checked against too (loss_scale_ranges), so a scaler made in
  // code refuses what the flags refuse.
  const auto in_range = [](const ValueRange& range, const char* name, double v) {
    if (std::string problem = range.problem(name, v); !problem.empty()) throw UsageError("loss scaler: " + problem);
  };
  if (options_.kind == LossScaling::dynamic) {
    in_range(loss_scale_ranges::kGrowthFactor, "the growth factor", options_.growth_factor);
    in_range(loss_scale_ranges::kBackoffFactor, "the backoff factor", options_.backoff_factor);
    if (options_.growth_interval < 1 || options_.hysteresis < 1) {
      throw std::invalid_argument("loss scaler: growth interval and hysteresis must be at least 1");
    }
    if (!(options_.min_scale >= 0) || !(options_.min_scale <= options_.max_scale) || std::isinf(options_.min_scale)) {
      throw std::invalid_argument("loss scaler: need 0 <= min scale <= max scale, min scale finite");
    }
  }
  if (options_.kind != LossScaling::none) in_range(loss_scale_ranges::kScale, "the initial scale", options_.init_scale);
  state_.scale = options_.kind == LossScaling::none ? 1.0 : options_.init_scale;
  if (options_.kind == LossScaling::dynamic) {
    state_.scale = std::min(std::max(state_.scale, options_.min_scale), options_.max_scale);
  }
  state_.hysteresis_left = options_.hysteresis;
}

Tensor LossScaler::scale_loss(const Tensor& loss) const {
  const DType f = loss.dtype() == DType::f64 ? DType::f64 : DType::f32;
  return mul(cast(loss, f), state_.scale);
}

StepReport LossScaler::unscale(std::span<const Tensor> gradients) { return examine(gradients, true, nullptr); }

StepReport LossScaler::check(std::span<const Tensor> gradients, BatchedReads* reads) { return examine(gradients, false, reads); }

StepReport LossScaler::examine(std::span<const Tensor> gradients, bool in_place, BatchedReads* reads) {
  if (unscaled_) {
    throw std::logic_error("loss scaler: unscale() or check() called twice in one step; call update() after the "
                           "optimizer step");
  }
  StepReport r;
  r.scale = state_.scale;
  // Values whose unscaled magnitude is below half the smallest subnormal of the compute format round
  // to zero there; before the division they are below that times the scale.
  const double half_subnormal = options_.compute == DType::f64 ? 0.0 : traits(format_of(options_.compute)).min_subnormal / 2;
  const double below = half_subnormal * state_.scale;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < gradients.size(); ++i) {
    if (!gradients[i].defined()) {
      throw std::logic_error("loss scaler: gradient " + std::to_string(i) +
                             " is missing; call backward() before unscale() (stepping before backward?)");
    }
  }
  // In place: g /= scale, the norm of the results. Check only: nothing written, the norm of the scaled
  // values (divided by the scale below).
  const detail::GradientCheck c = scale_and_check_all(gradients, in_place ? 1.0 / state_.scale : 1.0, below, reads);
  r.nonfinite = c.nonfinite;
  r.skipped = r.nonfinite > 0;
  r.grad_norm = std::sqrt(c.sum_squares) / (in_place ? 1.0 : state_.scale);
  r.underflow_fraction = c.count > 0 ? static_cast<double>(c.underflow) / static_cast<double>(c.count) : 0.0;
  finish(r);
  return r;
}

StepReport LossScaler::record_overflow(std::int64_t nonfinite) {
  if (unscaled_) {
    throw std::logic_error("loss scaler: record_overflow() after unscale() or check() in one step");
  }
  StepReport r;
  r.scale = state_.scale;
  r.skipped = true;
  r.nonfinite = nonfinite;
  finish(r);
  return r;
}

void LossScaler::finish(StepReport& r) {
  unscaled_ = true;
  last_overflow_ = r.skipped;
  // A collapse is reported at the step that shows it, before update() counts it.
  if (r.skipped && options_.kind == LossScaling::dynamic && at_floor() &&
      state_.floor_overflows + 1 >= options_.floor_patience) {
    r.warning = "loss scale collapsed: " + std::to_string(state_.floor_overflows + 1) +
                " overflowing steps in a row at the floor scale " + std::to_string(state_.scale) +
                "; the gradients overflow " + std::string(dtype_name(options_.compute)) +
                " even unscaled. Lower the learning rate, train in bf16, or keep the overflowing layers in f32";
    if (options_.error_on_collapse) {
      unscaled_ = false;
      throw LossScaleCollapse(r.warning);
    }
  }
}

void LossScaler::update() {
  if (!unscaled_) {
    throw std::logic_error("loss scaler: update() without unscale(); call unscale() after backward, once per step");
  }
  unscaled_ = false;
  ++state_.steps;
  if (last_overflow_) ++state_.skipped;
  if (options_.kind != LossScaling::dynamic) return;
  LossScalerState& s = state_;
  if (last_overflow_) {
    // PyTorch: back off and restart the growth count. DeepSpeed's hysteresis: back off only with one
    // left, else use one up (it is not re-armed here, so overflows past it back off each time).
    s.growth_tracker = 0;
    if (at_floor()) ++s.floor_overflows;
    if (s.hysteresis_left <= 1) {
      s.scale = std::max(s.scale * options_.backoff_factor, options_.min_scale);
    } else {
      --s.hysteresis_left;
    }
    return;
  }
  s.floor_overflows = 0;
  if (options_.consecutive_hysteresis) s.hysteresis_left = options_.hysteresis;
  // PyTorch: after growth_interval good steps in a row, grow, unless that would not be finite (the
  // scale multiplies f32 losses, so finite in f32).
  if (++s.growth_tracker == options_.growth_interval) {
    const double grown = s.scale * options_.growth_factor;
    if (std::isfinite(static_cast<float>(grown))) s.scale = std::min(grown, options_.max_scale);
    s.growth_tracker = 0;
    s.hysteresis_left = options_.hysteresis;
  }
}

bool LossScaler::at_floor() const { return state_.scale <= std::max(options_.min_scale, 1.0); }

void LossScaler::load_state(const LossScalerState& state) {
  // The meaning, not only the bytes: a scale the losses can be multiplied by in f32, within this
  // scaler's bounds; counters that count.
  const auto refuse = [](const std::string& what) { throw std::invalid_argument("loss scaler: saved " + what); };
  const auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  if (!loss_scale_ranges::kScale.contains(state.scale)) {  // (1e-300 is 0 in f32; 1e-40 loses bits)
    refuse("scale " + number(state.scale) + " is not a positive number f32 holds as a normal number");
  }
  if (options_.kind == LossScaling::dynamic && (state.scale < options_.min_scale || state.scale > options_.max_scale)) {
    refuse("scale " + number(state.scale) + " is outside this scaler's bounds [" + number(options_.min_scale) + ", " +
           number(options_.max_scale) + "]");
  }
  if (state.growth_tracker < 0 || state.floor_overflows < 0 || state.steps < 0 || state.skipped < 0) {
    refuse("counters are negative (growth tracker " + std::to_string(state.growth_tracker) + ", steps " +
           std::to_string(state.steps) + ", skipped " + std::to_string(state.skipped) + ")");
  }
  if (state.skipped > state.steps) refuse("count of skipped steps (" + std::to_string(state.skipped) + ") exceeds its steps");
  if (state.hysteresis_left < 1) refuse("hysteresis left (" + std::to_string(state.hysteresis_left) + ") is below 1");
  state_ = state;
  // A fixed scale, or none, is this run's setting (--resume-allow loss-scale may have changed it).
  if (options_.kind == LossScaling::fixed) state_.scale = options_.init_scale;
  if (options_.kind == LossScaling::none) state_.scale = 1.0;
  unscaled_ = false;
}

double clip_grad_norm(std::span<const Tensor> gradients, double max_norm, double norm) {
  NoGradGuard no_grad;
  if (norm < 0) {
    norm = std::sqrt(scale_and_check_all(gradients, 1.0, 0.0, nullptr).sum_squares);
  }
  if (!(norm > max_norm)) return 1.0;
  const double factor = max_norm / (norm + 1e-6);
  scale_and_check_all(gradients, factor, 0.0, nullptr);
  return factor;
}

}  // namespace mantissa
