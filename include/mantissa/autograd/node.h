// Reverse-mode automatic differentiation: each op that records history creates a Node, which knows
// how to turn the gradient of its output into gradients of its inputs. Ops define their Node next to
// their forward (src/ops/); this header is what they build on.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/core/tensor.h"

namespace mantissa {

class Node {
 public:
  virtual ~Node() = default;
  // Gradients with respect to each input, in input order (undefined where an input needs none), given
  // the gradient of the output. Runs with gradient recording off.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  virtual std::string_view name() const = 0;
  // Drops what the node saved for backward; called once the graph has been used, unless retained.
  virtual void release() {}

  struct Input {
    std::shared_ptr<Node> node;  // where the input's gradient goes; null if it needs none
    Shape shape;
    DType dtype;
  };
  std::vector<Input> inputs;
  bool released = false;
  const char* region = nullptr;  // the KernelRegion open when the op ran; its backward counts there too
  std::shared_ptr<const std::string> layer;  // the LayerScope's path when it was recorded (watch.h)
  bool tap_grad = false;  // its output is a tapped layer's: the gradient reaching it goes to the LayerTap
};

// Whether ops record history on this thread (off inside NoGradGuard and during backward).
bool grad_enabled();
// Whether a backward pass is running on this thread. Autocast stays out of it: each node's backward runs
// in the dtypes its forward recorded, not in those of a region backward() happens to be called in (an
// f32 layer's gradients would otherwise be bf16 products).
bool in_backward();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool saved_;
};

// Told, on the thread running backward, when a leaf's gradient for this pass is complete: every
// contribution has been summed into its .grad, and the pass will not touch it again. Data-parallel training
// starts reducing gradients this way while backward goes on.
class GradReadyHook {
 public:
  virtual ~GradReadyHook() = default;
  virtual void ready(const Tensor& leaf) = 0;
};

// Installs a hook for this thread's backward passes while it lives (the previous one after).
class GradReadyHookGuard {
 public:
  explicit GradReadyHookGuard(GradReadyHook* hook);
  ~GradReadyHookGuard();
  GradReadyHookGuard(const GradReadyHookGuard&) = delete;
  GradReadyHookGuard& operator=(const GradReadyHookGuard&) = delete;

 private:
  GradReadyHook* saved_;
};

// True if recording is on and any of the tensors requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Connects `out` to `node`, whose inputs are `inputs` (in the order its backward returns gradients).
void record(const Tensor& out, std::shared_ptr<Node> node, std::initializer_list<const Tensor*> inputs);

// A handle to keep for backward: the same data without history (so no reference cycle through the
// node), and its storage counted as an activation unless it is a parameter or gradient.
Tensor save_for_backward(const Tensor& t);

}  // namespace mantissa
