// The trainer's weights in and out by PyTorch's names (Trainer::weights, set_weights): the Python module's
// state_dict() and load_state_dict(). Kept apart from the step: they touch the optimizer's master copies,
// which only the trainer knows belong to which parameter.
#include <map>

#include "mantissa/autograd/node.h"
#include "mantissa/io/weights.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/trainer.h"

namespace mantissa::train {
namespace {

// Parameter name -> its index among the optimizer's parameters (built over module().parameters(), in
// named_parameters() order).
std::map<std::string, std::size_t> parameter_index(const nn::Module& module) {
  std::map<std::string, std::size_t> index;
  for (const auto& [name, p] : module.named_parameters()) index.emplace(name, index.size());
  return index;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Trainer::weights() const {
  const NoGradGuard no_grad;
  const std::map<std::string, std::size_t> index = parameter_index(model_.module());
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : model_weights(model_.module())) {
    const auto it = index.find(name);
    const bool master = it != index.end() && optimizer_->has_master_copy(it->second);
    out.emplace_back(name, cast(master ? optimizer_->master_weight(it->second) : t, DType::f32).to(Device::cpu()));
  }
  return out;
}

void Trainer::set_weights(const std::vector<std::pair<std::string, Tensor>>& weights, const std::string& where) {
  const NoGradGuard no_grad;
  load_weights(model_.module(), weights, where);
  const std::map<std::string, std::size_t> index = parameter_index(model_.module());
  for (const auto& [name, t] : weights) {
    const auto it = index.find(name);
    if (it != index.end() && optimizer_->has_master_copy(it->second)) {
      const Tensor& master = optimizer_->master_weight(it->second);
      copy_into(master, cast(t, DType::f32).to(master.device()));
    }
  }
}

}  // namespace mantissa::train
