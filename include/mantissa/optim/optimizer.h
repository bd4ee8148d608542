// Optimizers with master weights in plain sight (as tiny-cuda-nn's step takes them): each parameter's
// update is applied to its f32 master weights, either the parameter itself (f32 parameters: autocast
// mode, Apex O1) or an f32 master copy the optimizer holds for a bf16/f16 parameter (low-precision-model
// mode, Apex O2), written back into the parameter after each step with nearest or stochastic rounding.
// The update reads the parameter's gradient as backward left it (scaled, in its own dtype) and multiplies
// it by the step's grad_scale (the inverse loss scale, times a clipping factor) in f32 as it goes: no
// gradient is ever unscaled in f16, and no pass over the gradients is spent on unscaling.
// Updating bf16/f16 parameters in place, without a master copy, loses every update smaller than half
// an ulp of the weight; it is allowed only when asked for explicitly.
//
// Algorithms and defaults are PyTorch's (torch.optim.SGD, Adam, AdamW). State is f32 unless bf16 is
// asked for (half the memory, 8 bits of precision in the moments).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/core/tensor.h"
#include "mantissa/numeric/rounding.h"

namespace mantissa {
namespace detail {
struct ParamUpdate;  // one parameter of a backend's update (src/backend/kernels.h)
struct WriteBack;
}  // namespace detail

struct MasterWeightOptions {
  // Keep an f32 master copy of each bf16/f16 parameter (recommended).
  bool enabled = true;
  // How the master copy is written back into the parameter.
  Rounding writeback = Rounding::nearest_even;
  std::uint64_t seed = 0;  // stochastic write-back draws from (seed + step, element index)
  // With enabled = false, bf16/f16 parameters are updated in place, losing small updates: only when
  // this is set, so that nobody gets it by accident.
  bool allow_pure_low_precision = false;
};

// Everything needed to resume exactly: the step count and copies of every state tensor, by name
// ("master.3", "momentum.0", "m.1", "v.1", ...).
struct OptimizerState {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, Tensor>> tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update from the parameters' current gradients times grad_scale (parameters without a gradient
  // are left alone).
  void step(double grad_scale = 1.0);
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  std::int64_t steps() const { return step_; }
  const std::vector<Tensor>& params() const { return params_; }
  // The f32 weights parameter i's updates apply to: its master copy, or the f32 parameter itself.
  const Tensor& master_weight(std::size_t i) const { return master_weights_[i]; }
  // Whether parameter i is bf16/f16 with an f32 master copy (written back into it after each step).
  bool has_master_copy(std::size_t i) const { return has_master_copy_[i]; }
  // The parameters' gradients in order (undefined where none).
  std::vector<Tensor> gradients() const;

  OptimizerState state() const;
  // Restores a state() of an optimizer over parameters of the same shapes and dtypes; throws naming what
  // differs. With `complete`, a state past step 0 must also hold every tensor a step makes when every
  // parameter has a gradient (each master copy and each slot in use), so that a checkpoint missing some
  // cannot resume with zeros in their place.
  void load_state(const OptimizerState& state, bool complete = false);

 protected:
  // `slots` names the optimizer's per-parameter state tensors ("momentum", "m", "v").
  Optimizer(std::vector<Tensor> params, double lr, MasterWeightOptions master, DType state_dtype,
            std::vector<std::string> slots);
  // Applies one update to the parameters of `list` (all on one device: their f32 master weights, their
  // gradients, contiguous, any compute dtype, times grad_scale, and their state), writing master copies
  // back by `w`: one backend call for the lot.
  virtual void update(std::span<const detail::ParamUpdate> list, double grad_scale, const detail::WriteBack& w) = 0;
  // Whether the update creates state tensor `slot` for a parameter with a gradient (SGD without momentum
  // keeps none).
  virtual bool slot_in_use(std::size_t slot) const { return slot < slot_names_.size(); }
  // State tensor `slot` (an index into the names given) of parameter i; undefined until created.
  Tensor& state_tensor(std::size_t slot, std::size_t i) { return state_[slot][i]; }
  // The same, created as zeros (shaped like parameter i, in the state dtype) if it does not exist yet.
  Tensor& state_tensor_or_zeros(std::size_t slot, std::size_t i);

 private:
  // Writes parameter i's master copy back into it (nearest or stochastic, as configured).
  void write_back(std::size_t i);
  // What this step's update of parameter i is given (its state created where it is due).
  detail::ParamUpdate update_of(std::size_t i, const Tensor& grad);

  std::vector<Tensor> params_;
  std::vector<Tensor> master_weights_;  // f32: a master copy, or the parameter itself
  std::vector<bool> has_master_copy_;
  double lr_;
  MasterWeightOptions master_;
  DType state_dtype_;
  std::vector<std::string> slot_names_;
  std::vector<std::vector<Tensor>> state_;  // [slot][parameter]
  std::int64_t step_ = 0;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double weight_decay = 0;
  bool nesterov = false;
  DType state_dtype = DType::f32;
  MasterWeightOptions master = {};
};

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<Tensor> params, SgdOptions options = {});

 private:
  bool slot_in_use(std::size_t) const override { return options_.momentum != 0; }
  void update(std::span<const detail::ParamUpdate> list, double grad_scale, const detail::WriteBack& w) override;
  SgdOptions options_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: L2 added to the gradient; AdamW: decoupled (PyTorch's default 0.01)
  DType state_dtype = DType::f32;
  MasterWeightOptions master = {};
};

class Adam final : public Optimizer {
 public:
  // decoupled = true is AdamW.
  Adam(std::vector<Tensor> params, AdamOptions options = {}, bool decoupled = false);

 private:
  void update(std::span<const detail::ParamUpdate> list, double grad_scale, const detail::WriteBack& w) override;
  AdamOptions options_;
  bool decoupled_;
};

// AdamW with PyTorch's default decay 0.01.
inline AdamOptions adamw_defaults() {
  AdamOptions o;
  o.weight_decay = 0.01;
  return o;
}

// Learning-rate schedules: constant, or linear warm-up from 0 then cosine decay to min_lr.
class LrSchedule {
 public:
  static LrSchedule constant(double lr);
  // lr(step) = base (step + 1) / warmup for step < warmup; then min + (base - min) (1 + cos(pi t)) / 2
  // with t = (step - warmup) / (total - warmup), clamped to [0, 1].
  static LrSchedule warmup_cosine(double base, std::int64_t warmup, std::int64_t total, double min_lr = 0);
  double at(std::int64_t step) const;
  std::int64_t warmup() const { return warmup_; }  // steps of the warm-up (0: none)

 private:
  double base_ = 0, min_ = 0;
  std::int64_t warmup_ = 0, total_ = 0;
  bool cosine_ = false;
};

}  // namespace mantissa
