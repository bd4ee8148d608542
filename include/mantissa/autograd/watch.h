// Watching the ops as they run, for the numerics tools: which layer each op belongs to (a LayerScope,
// opened by every module's forward; each autograd node keeps the one it was recorded in, so its backward
// is named after the same layer), the non-finite tracer, and the telemetry's taps on layer outputs.
//
// The tracer (set_trace_nonfinite(true), or `mantissa train --trace-nonfinite`) checks the output of
// every op that records history, forward, and every gradient an op's backward returns. The first op that
// turns finite inputs into an inf or NaN throws NonFiniteError with one report: the op, the layer,
// forward or backward, the dtype, the largest magnitudes of its inputs and the loss scale. Off, it costs
// one flag test per op.
//
//   set_trace_nonfinite(true);
//   try { loss = model.loss(batch); scaler.scale_loss(loss).backward(); }
//   catch (const NonFiniteError& e) { std::cerr << e.what() << "\n"; }  // "non-finite in backward of ..."
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/base/errors.h"
#include "mantissa/core/tensor.h"

namespace mantissa {

class Node;

// A layer's path in its model ("blocks.0.attn.qkv"; "" for the model itself), shared by the nodes
// recorded in it.
using LayerPath = std::shared_ptr<const std::string>;

// The telemetry's view of a step: each tapped layer's output as it is made, and the gradient that
// reaches it in backward (as held: multiplied by the loss scale).
class LayerTap {
 public:
  virtual ~LayerTap() = default;
  virtual void activation(const std::string& layer, const Tensor& output) = 0;
  virtual void activation_grad(const std::string& layer, const Tensor& grad) = 0;
};

// Ops recorded during its lifetime belong to `path` (the innermost scope wins). With `tap`, the last op
// output recorded directly in it (the layer's output) goes to the thread's LayerTap, if one is set, when
// the scope closes, and its gradient when backward reaches it.
class LayerScope {
 public:
  explicit LayerScope(LayerPath path, bool tap = false);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

  const LayerPath& path() const { return path_; }
  // Called by record() for each op output made in the innermost scope.
  void note_output(const Tensor& out, Node& node);

 private:
  LayerScope* outer_;
  LayerPath path_;
  bool tap_;
  Tensor last_output_;
  Node* last_node_ = nullptr;
};

// The innermost open scope on this thread, or null.
LayerScope* current_layer_scope();
// Its path (null outside any scope).
LayerPath current_layer();

// Sets this thread's tap for its lifetime (null: none); restores the previous one after.
class LayerTapGuard {
 public:
  explicit LayerTapGuard(LayerTap* tap);
  ~LayerTapGuard();
  LayerTapGuard(const LayerTapGuard&) = delete;
  LayerTapGuard& operator=(const LayerTapGuard&) = delete;

 private:
  LayerTap* saved_;
};
LayerTap* current_layer_tap();

// What the tracer found.
struct NonFiniteReport {
  std::string op;            // the autograd node's name, e.g. "linear"
  std::string layer;         // the module path; "" for the model itself
  bool backward = false;     // found in the backward pass
  DType dtype = DType::f32;  // of the non-finite result
  std::int64_t nonfinite = 0, count = 0;
  // Forward: the largest finite magnitude of each input, in order (0 for an input not given). Backward:
  // of the gradient that reached the op.
  std::vector<double> input_amax;
  // Which input was already not finite (an input without history: data or a parameter), or -1.
  int nonfinite_input = -1;
  double loss_scale = 1;
  // One line: "non-finite in forward of linear at blocks.1.mlp.fc (bf16): 12 of 4096 values inf/NaN
  // from finite inputs (largest magnitudes 3.2e+04, 1.1e+02); loss scale 65536".
  std::string str() const;
};

class NonFiniteError : public Error {
 public:
  explicit NonFiniteError(NonFiniteReport report);
  const NonFiniteReport& report() const { return report_; }

 private:
  NonFiniteReport report_;
};

// The tracer switch (for every thread).
void set_trace_nonfinite(bool on);
bool trace_nonfinite();
// The loss scale the reports quote; the trainer sets it before each step (this thread).
void set_trace_loss_scale(double scale);

namespace detail {
// The engine's checks (src/autograd/engine.cpp): throw NonFiniteError if `out` holds an inf or NaN.
void trace_forward(const Tensor& out, const Node& node, const std::vector<const Tensor*>& inputs);
void trace_backward(const Tensor& grad_in, const Node& node, const Tensor& grad_out);
// The number of inf and NaN values in t, and the largest finite magnitude.
std::int64_t count_nonfinite(const Tensor& t);
double finite_amax(const Tensor& t);
}  // namespace detail

}  // namespace mantissa
