// Optimizer bookkeeping: master copies, stepping, state save/restore, learning-rate schedules. The
// arithmetic of each update is a fused backend kernel (sgd_update, adam_update).
#include "mantissa/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "../backend/registry.h"
#include "mantissa/autograd/node.h"
#include "mantissa/core/memory.h"
#include "mantissa/ops/ops.h"
#include "mantissa/numeric/parse_number.h"

namespace mantissa {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, MasterWeightOptions master, DType state_dtype,
                     std::vector<std::string> slots)
    : params_(std::move(params)), lr_(lr), master_(master), state_dtype_(state_dtype), slot_names_(std::move(slots)),
      state_(slot_names_.size(), std::vector<Tensor>(params_.size())) {
  if (state_dtype_ != DType::f32 && state_dtype_ != DType::bf16) {
    throw std::invalid_argument("optimizer: state must be f32 or bf16");
  }
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.defined() || !p.is_contiguous()) {
      throw std::invalid_argument("optimizer: parameter " + std::to_string(i) + " is undefined or not contiguous");
    }
    const bool low = p.dtype() == DType::f16 || p.dtype() == DType::bf16;
    if (is_storage_only(p.dtype())) {
      throw std::invalid_argument("optimizer: parameter " + std::to_string(i) + " is " +
                                  std::string(dtype_name(p.dtype())) + ", a storage format");
    }
    if (low && master_.enabled) {
      MemoryCategoryScope scope(MemoryCategory::parameters);  // master copies count as parameters
      master_weights_.push_back(contiguous_copy(cast(p, DType::f32)));
      has_master_copy_.push_back(true);
      continue;
    }
    if (low && !master_.allow_pure_low_precision) {
      throw std::invalid_argument("optimizer: parameter " + std::to_string(i) + " is " +
                                  std::string(dtype_name(p.dtype())) +
                                  " and there is no f32 master copy; keep master weights enabled (updates "
                                  "smaller than half an ulp would be lost), or set allow_pure_low_precision");
    }
    master_weights_.push_back(p);
    has_master_copy_.push_back(false);
  }
}

std::vector<Tensor> Optimizer::gradients() const {
  std::vector<Tensor> g;
  for (const Tensor& p : params_) g.push_back(p.grad());
  return g;
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

Tensor& Optimizer::state_tensor_or_zeros(std::size_t slot, std::size_t i) {
  Tensor& t = state_[slot][i];
  if (!t.defined()) {
    MemoryCategoryScope scope(MemoryCategory::optimizer_state);
    t = Tensor::zeros(params_[i].shape(), state_dtype_, params_[i].device());
  }
  return t;
}

void Optimizer::step(double grad_scale) {
  NoGradGuard no_grad;
  ++step_;
  std::vector<detail::ParamUpdate> list;
  std::vector<std::size_t> updated;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    if (g.shape() != params_[i].shape()) {
      throw std::logic_error("optimizer: gradient of parameter " + std::to_string(i) + " has shape " +
                             shape_str(g.shape()) + ", the parameter " + shape_str(params_[i].shape()));
    }
    list.push_back(update_of(i, contiguous(g)));
    updated.push_back(i);
  }
  // The update on the f32 master weights, from the gradients as backward left them, times grad_scale;
  // each master copy written back into its parameter in the same pass.
  const detail::WriteBack w{master_.writeback, master_.seed + static_cast<std::uint64_t>(step_)};
  detail::for_each_device(std::span<const detail::ParamUpdate>(list), [](const detail::ParamUpdate& u) { return u.param.device(); },
                          [&](Device, std::span<const detail::ParamUpdate> group) { update(group, grad_scale, w); });
  for (const std::size_t i : updated) {
    if (has_master_copy_[i]) master_weights_[i].storage()->bump_version();
    params_[i].storage()->bump_version();  // casts made from the old values (autocast's cache) are stale
  }
}

detail::ParamUpdate Optimizer::update_of(std::size_t i, const Tensor& grad) {
  detail::ParamUpdate u{.param = master_weights_[i], .grad = grad};
  if (slot_names_.size() > u.state.size()) throw std::logic_error("optimizer: more state slots than an update takes");
  for (std::size_t k = 0; k < slot_names_.size(); ++k) {
    if (!slot_in_use(k)) continue;
    if (k == 0) u.first = !state_tensor(0, i).defined();  // SGD's momentum starts as the first gradient
    u.state[k] = state_tensor_or_zeros(k, i);
  }
  if (has_master_copy_[i]) u.low = params_[i];
  return u;
}

void Optimizer::write_back(std::size_t i) {
  detail::run_kernel<detail::kernel::RoundInto>(params_[i].device(), master_weights_[i], params_[i], master_.writeback,
                                                master_.seed + static_cast<std::uint64_t>(step_));
}

OptimizerState Optimizer::state() const {
  OptimizerState s;
  s.step = step_;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (has_master_copy_[i]) s.tensors.emplace_back("master." + std::to_string(i), contiguous_copy(master_weights_[i]));
    for (std::size_t k = 0; k < slot_names_.size(); ++k) {
      const Tensor& t = state_[k][i];
      if (t.defined()) s.tensors.emplace_back(slot_names_[k] + "." + std::to_string(i), contiguous_copy(t));
    }
  }
  return s;
}

void Optimizer::load_state(const OptimizerState& state, bool complete) {
  NoGradGuard no_grad;
  if (state.step < 0) throw std::invalid_argument("optimizer state: step " + std::to_string(state.step) + " is negative");
  if (complete && state.step > 0) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      std::vector<std::string> wanted;
      if (has_master_copy_[i]) wanted.push_back("master." + std::to_string(i));
      for (std::size_t k = 0; k < slot_names_.size(); ++k) {
        if (slot_in_use(k)) wanted.push_back(slot_names_[k] + "." + std::to_string(i));
      }
      for (const std::string& w : wanted) {
        const bool found = std::any_of(state.tensors.begin(), state.tensors.end(), [&](const auto& e) { return e.first == w; });
        if (!found) throw std::invalid_argument("optimizer state: '" + w + "' is missing");
      }
    }
  }
  for (const auto& [key, saved] : state.tensors) {
    const auto dot = key.rfind('.');
    const std::string name = key.substr(0, dot);
    const std::size_t i = dot == std::string::npos
                              ? params_.size()
                              : parse_number<std::size_t>(std::string_view(key).substr(dot + 1), "optimizer state '" + key + "'");
    if (i >= params_.size()) throw std::invalid_argument("optimizer state: '" + key + "' names no parameter");
    if (saved.shape() != params_[i].shape()) {
      throw std::invalid_argument("optimizer state: '" + key + "' has shape " + shape_str(saved.shape()) +
                                  ", parameter " + std::to_string(i) + " is " + shape_str(params_[i].shape()));
    }
    Tensor* target = nullptr;
    if (name == "master" && has_master_copy_[i]) target = &master_weights_[i];
    for (std::size_t k = 0; k < slot_names_.size(); ++k) {
      if (slot_names_[k] == name) target = &state_tensor_or_zeros(k, i);
    }
    if (target == nullptr) throw std::invalid_argument("optimizer state: '" + key + "' is not state of this optimizer");
    if (saved.dtype() != target->dtype()) {
      throw std::invalid_argument("optimizer state: '" + key + "' is " + std::string(dtype_name(saved.dtype())) + ", this optimizer keeps " +
                                  std::string(dtype_name(target->dtype())));
    }
    if (name == "v") {  // Adam's second moment, a mean of squares: its square root is taken
      const Tensor v = contiguous(cast(saved.device() == Device::cpu() ? saved : saved.to(Device::cpu()), DType::f32));
      const float* p = v.data_as<float>();
      for (std::int64_t j = 0; j < v.numel(); ++j) {
        if (!(p[j] >= 0)) {
          throw std::invalid_argument("optimizer state: '" + key + "' holds " + std::to_string(p[j]) + " at element " +
                                      std::to_string(j) + ", where a second moment is at least 0");
        }
      }
    }
    detail::run_kernel<detail::kernel::Copy>(target->device(), saved.device() == target->device() ? saved : saved.to(target->device()),
                                             *target);
  }
  step_ = state.step;
  // Parameters follow their restored master copies exactly as the last step left them.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (has_master_copy_[i]) write_back(i);
  }
}

Sgd::Sgd(std::vector<Tensor> params, SgdOptions options)
    : Optimizer(std::move(params), options.lr, options.master, options.state_dtype, {"momentum"}),
      options_(options) {}

void Sgd::update(std::span<const detail::ParamUpdate> list, double grad_scale, const detail::WriteBack& w) {
  const detail::SgdStep step{lr(), options_.momentum, options_.weight_decay, options_.nesterov, grad_scale};
  detail::run_kernel<detail::kernel::SgdUpdate>(list.front().param.device(), list, step, w);
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), options.lr, options.master, options.state_dtype, {"m", "v"}), options_(options),
      decoupled_(decoupled) {
  if (!(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1 && options.eps > 0)) {
    throw std::invalid_argument("adam: need 0 <= beta1, beta2 < 1 and eps > 0");
  }
}

void Adam::update(std::span<const detail::ParamUpdate> list, double grad_scale, const detail::WriteBack& w) {
  const detail::AdamStep step{lr(), options_.beta1, options_.beta2, options_.eps, options_.weight_decay,
                              decoupled_, steps(), grad_scale};
  detail::run_kernel<detail::kernel::AdamUpdate>(list.front().param.device(), list, step, w);
}

LrSchedule LrSchedule::constant(double lr) {
  LrSchedule s;
  s.base_ = s.min_ = lr;
  return s;
}

LrSchedule LrSchedule::warmup_cosine(double base, std::int64_t warmup, std::int64_t total, double min_lr) {
  if (warmup < 0 || total < warmup) throw std::invalid_argument("lr schedule: need 0 <= warmup <= total steps");
  LrSchedule s;
  s.base_ = base;
  s.min_ = min_lr;
  s.warmup_ = warmup;
  s.total_ = total;
  s.cosine_ = true;
  return s;
}

double LrSchedule::at(std::int64_t step) const {
  if (!cosine_) return base_;
  if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  const double span = static_cast<double>(std::max<std::int64_t>(total_ - warmup_, 1));
  const double t = std::clamp(static_cast<double>(step - warmup_) / span, 0.0, 1.0);
  return min_ + (base_ - min_) * 0.5 * (1 + std::cos(std::numbers::pi * t));
}

}  // namespace mantissa
