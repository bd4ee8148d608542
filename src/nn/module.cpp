// The module tree: parameter and buffer registration, traversal by path, modes, precision overrides.
#include "mantissa/nn/module.h"

#include <functional>

#include "mantissa/autograd/node.h"
#include "mantissa/core/memory.h"
#include "mantissa/ops/ops.h"

namespace mantissa::nn {

bool path_within(const std::string& path, const std::string& prefix) {
  return path == prefix || (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
                            path[prefix.size()] == '.');
}

Tensor& Module::register_parameter(const std::string& name, Tensor value) {
  if (value.defined()) {
    value.storage()->set_category(MemoryCategory::parameters);
    value.set_requires_grad();
  }
  params_.emplace_back(name, value);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value, bool on_host) {
  value.storage()->set_category(MemoryCategory::parameters);
  if (on_host) host_buffers_.insert(name);
  buffers_.emplace_back(name, value);
  return buffers_.back().second;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [name, t] : m.params_) {
      if (t.defined()) out.emplace_back(prefix + name, t);
    }
    for (const auto& [name, child] : m.children_) walk(*child, prefix + name + ".");
  };
  walk(*this, "");
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [name, t] : m.buffers_) out.emplace_back(prefix + name, t);
    for (const auto& [name, child] : m.children_) walk(*child, prefix + name + ".");
  };
  walk(*this, "");
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  const std::function<void(Module&, const std::string&)> walk = [&](Module& m, const std::string& path) {
    out.emplace_back(path, &m);
    for (auto& [name, child] : m.children_) walk(*child, path.empty() ? name : path + "." + name);
  };
  walk(*this, "");
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::set_precision_override(std::optional<AutocastPolicy> policy) { policy_ = std::move(policy); }

void Module::keep_in_f32() {
  AutocastPolicy p = AutocastPolicy::defaults();
  for (std::size_t i = 0; i < kAutocastOps; ++i) p.set(static_cast<AutocastOp>(i), AutocastPrecision::f32);
  policy_ = p;
}

bool Module::kept_in_f32() const {
  if (!policy_) return false;
  for (std::size_t i = 0; i < kAutocastOps; ++i) {
    if (policy_->precision(static_cast<AutocastOp>(i)) != AutocastPrecision::f32) return false;
  }
  return true;
}

Module::ForwardScope Module::forward_scope() const {
  std::unique_ptr<Autocast> autocast;
  if (policy_ && autocast_dtype()) autocast = std::make_unique<Autocast>(autocast_dtype(), *policy_);
  return ForwardScope{std::move(autocast), LayerScope(path(), children_.empty())};
}

LayerScope Module::part_scope(const std::string& name) const {
  LayerPath& p = parts_[name];
  if (!p) p = std::make_shared<const std::string>(path()->empty() ? name : *path() + "." + name);
  return LayerScope(p);
}

const LayerPath& Module::path() const {
  if (!path_) {
    std::string p = name_;
    if (parent_ != nullptr && !parent_->path()->empty()) p = *parent_->path() + "." + name_;
    path_ = std::make_shared<const std::string>(std::move(p));
  }
  return path_;
}

void Module::to_dtype(DType dtype) {
  NoGradGuard no_grad;
  if (!f32_parameters_) {
    for (auto& [name, t] : params_) {
      if (!t.defined() || t.dtype() == dtype) continue;
      MemoryCategoryScope scope(MemoryCategory::parameters);
      t = contiguous_copy(cast(t, dtype));
      t.set_requires_grad();
    }
  }
  for (auto& [name, child] : children_) child->to_dtype(dtype);
}

void Module::to_device(Device device) {
  NoGradGuard no_grad;
  for (auto& [name, t] : params_) {
    if (!t.defined() || t.device() == device) continue;
    MemoryCategoryScope scope(MemoryCategory::parameters);
    const bool grad = t.requires_grad();
    t = t.to(device);
    if (grad) t.set_requires_grad();
  }
  for (auto& [name, t] : buffers_) {
    if (!t.defined() || t.device() == device || host_buffers_.count(name) > 0) continue;
    MemoryCategoryScope scope(MemoryCategory::parameters);
    t = t.to(device);
  }
  for (auto& [name, child] : children_) child->to_device(device);
}

}  // namespace mantissa::nn
