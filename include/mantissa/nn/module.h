// Modules: named parameters and buffers, submodules, train/eval mode, and a per-module precision
// override, so users can build their own models the way they do in PyTorch.
//
// A module's forward pass is an ordinary member function of the concrete class (layers take tensors,
// GPT takes token ids); inside it, `forward_scope()` applies the module's precision override, if any,
// and names the ops it runs after the module's path (for the non-finite tracer and the telemetry).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/autograd/watch.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/core/tensor.h"

namespace mantissa::nn {

// Whether the module path `path` is `prefix` or lies under it ("blocks.1.mlp.fc" is under "blocks.1", not
// under "blocks.10" nor "blocks.1.mlp.f"): how every option that names layers by path matches them.
bool path_within(const std::string& path, const std::string& prefix);

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
  // Whether keep_in_f32() (or an override with every op in f32) is set on this module itself.
  bool kept_in_f32() const;

  // This module's path from the root of its tree ("blocks.0.attn.qkv"; "" for the root).
  const LayerPath& path() const;

  // Low-precision-model mode: parameters (not buffers) converted to dtype, except those of modules that
  // keep f32 parameters (norm layers). Replaces the parameter tensors: build the optimizer afterwards.
  void to_dtype(DType dtype);
  // Parameters and buffers moved to `device` (copies; parameters keep requires_grad), except the buffers
  // registered to stay on the host. Replaces the tensors: build the optimizer afterwards.
  void to_device(Device device);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor value);
  // on_host: the buffer stays on the host when the module moves to a GPU (state the host reads and writes
  // every step, such as FP8's scaling history, kept by its owner as this very tensor).
  Tensor& register_buffer(const std::string& name, Tensor value, bool on_host = false);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    module->parent_ = this;
    module->name_ = name;
    children_.emplace_back(name, module);
    return module;
  }
  // What a forward pass opens first: an autocast region with this module's override (in the enclosing
  // region's dtype), if it has one, and a layer scope with its path (tapped for telemetry in a module
  // without submodules: a layer).
  struct ForwardScope {
    std::unique_ptr<Autocast> autocast;
    LayerScope layer;
  };
  ForwardScope forward_scope() const;
  // A scope for the ops a module runs between its submodules, named path() + "." + name ("blocks.0").
  LayerScope part_scope(const std::string& name) const;
  // Norm layers keep their parameters in f32 in low-precision-model mode.
  void keep_parameters_f32() { f32_parameters_ = true; }

 private:
  // Deques: layers keep references to their entries, which must survive later registrations (and see
  // to_dtype() replace the tensors).
  std::deque<std::pair<std::string, Tensor>> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::set<std::string> host_buffers_;  // the buffers to_device() leaves on the host
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool f32_parameters_ = false;
  std::optional<AutocastPolicy> policy_;
  const Module* parent_ = nullptr;
  std::string name_;                                   // as the parent registered it
  mutable LayerPath path_;                             // made on first use, once the tree is built
  mutable std::map<std::string, LayerPath> parts_;     // part_scope()'s paths
};

}  // namespace mantissa::nn
