// Modules: named parameters and buffers, submodules, train/eval mode, and a per-module precision
// override, so users can build their own models the way they do in PyTorch.
//
// A module's forward pass is an ordinary member function of the concrete class (layers take tensors,
// GPT takes token ids); inside it, `precision_scope()` applies the module's override, if any.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/ops/autocast.h"
#include "mantissa/core/tensor.h"

namespace mantissa::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters of this module and its submodules, depth-first, named by path ("blocks.0.attn.qkv.weight").
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Non-trainable state (batch norm's running statistics), named the same way.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::int64_t parameter_count() const;
  // This module ("") and every submodule, depth-first, named by path ("blocks.0.attn.qkv").
  std::vector<std::pair<std::string, Module*>> named_modules();

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Run this module (and its submodules) with this autocast policy inside autocast regions, e.g.
  // keep_in_f32() for a layer that must not run in low precision. std::nullopt removes the override.
  void set_precision_override(std::optional<AutocastPolicy> policy);
  // Every op of the module in f32, even inside an autocast region.
  void keep_in_f32();

  // Low-precision-model mode: parameters (not buffers) converted to dtype, except those of modules that
  // keep f32 parameters (norm layers). Replaces the parameter tensors: build the optimizer afterwards.
  void to_dtype(DType dtype);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }
  // An autocast region with this module's override (in the enclosing region's dtype), or null.
  std::unique_ptr<Autocast> precision_scope() const;
  // Norm layers keep their parameters in f32 in low-precision-model mode.
  void keep_parameters_f32() { f32_parameters_ = true; }

 private:
  // Deques: layers keep references to their entries, which must survive later registrations (and see
  // to_dtype() replace the tensors).
  std::deque<std::pair<std::string, Tensor>> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool f32_parameters_ = false;
  std::optional<AutocastPolicy> policy_;
};

}  // namespace mantissa::nn
