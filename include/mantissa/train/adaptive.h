// Precision that adapts per layer: a controller that moves each layer with products (linear and
// convolution layers) between three levels, f32 > the run's 16-bit format (bf16 or fp16) > fp8 (linear
// layers only, per-tensor current scaling), from the numerics telemetry and the training phase:
//   up, at any time: a layer whose output overflows or nears the top of its format, or whose gradients
//     (output gradient, weight gradient) sit below the format's smallest normal as held (at the step's
//     loss scale), or which skipped steps keep blaming, moves up one level;
//   down, after a warm-up: a layer whose tensors would keep nearly everything one level lower (fp8: its
//     output, weight and output gradient fit a per-tensor scaled e4m3/e5m2; 16-bit: its gradients would
//     stay normal and its outputs far from overflow) moves down one level, unless it moved up recently
//     (it waits some decisions) or too often (it stays).
// Every change is a PrecisionChange with its reason, made to the run's one PrecisionPlan (the trainer's)
// and applied to the layer from there. The plan (each layer's level) and the controller's
// counters go into checkpoints, so a resumed run decides exactly as the whole run would; a plan can be
// written out and run fixed (`mantissa train --precision-plan FILE`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mantissa/nn/module.h"
#include "mantissa/train/precision_plan.h"
#include "mantissa/train/telemetry.h"

namespace mantissa::train {

struct AdaptiveOptions {
  DType low = DType::bf16;
  bool fp8 = true;              // linear layers may move down to fp8
  std::int64_t every = 20;      // steps between decisions (the telemetry's interval)
  std::int64_t warmup = 100;    // no layer moves down before this step
  int hold = 5;                 // decisions a layer that moved up waits before it may move down
  int max_ups = 2;              // after this many moves up, a layer stays where it is
  double underflow = 0.01;      // up: a gradient's share of non-zero values held below the smallest normal
  double safe = 0.001;          // down: that share, predicted for the lower level, at most this
  double headroom = 2;          // up: an output within 2^headroom of the largest finite; down: needs 2 more
  double fp8_loss = 0.005;      // down to fp8: share a per-tensor scaled fp8 would lose, at most this (up: 4x)
  int skips = 2;                // skipped steps in a row blamed on one layer before it moves up
  void check() const;           // throws std::invalid_argument
};

struct PrecisionChange {
  std::int64_t step = 0;
  std::string layer;
  LayerPrecision from = LayerPrecision::low, to = LayerPrecision::low;
  std::string reason;
  std::string json(DType low) const;  // {"step": 120, "layer": "...", "from": "bf16", "to": "fp8", "reason": "..."}
  std::string str(DType low) const;   // "blocks.0.mlp.fc bf16 -> fp8: ..."
};

class PrecisionController {
 public:
  // Every product layer starts at the 16-bit level. `plan` is the run's plan (the trainer's), which the
  // controller fills and then edits with each move; it must outlive the controller.
  PrecisionController(nn::Module& model, AdaptiveOptions options, PrecisionPlan& plan);
  const PrecisionPlan& plan() const { return plan_; }
  const AdaptiveOptions& options() const { return options_; }
  // The telemetry it decides from: every `every` steps, all four tensor kinds, every layer.
  TelemetryPolicy telemetry() const;
  // One decision from a sampled step's records; the changes are applied to the model.
  std::vector<PrecisionChange> decide(std::int64_t step, const std::vector<TensorNumerics>& records);
  // A skipped step whose inf/NaN came from `where` (a module path, or a parameter's name).
  std::vector<PrecisionChange> blame(std::int64_t step, const std::string& where, const std::string& why);
  // After every step: its products counted at each layer's level; a good step clears the blame.
  void count_step(bool skipped);
  // The share of the run's multiply-adds (of the product layers) at each level so far.
  std::map<LayerPrecision, double> product_shares() const;
  // The plan and every counter, for checkpoints; loading applies the plan.
  std::string state_json() const;
  void load_state_json(std::string_view json);  // throws std::invalid_argument

 private:
  struct Layer {
    nn::Module* module = nullptr;
    bool linear = false;
    std::int64_t fan_in = 0;       // multiply-adds per output value
    double macs = 0;               // per step, from the last sampled output size
    int ups = 0;                   // moves up so far
    std::int64_t up_decision = -1000;  // the decision that last moved it up
    int blamed = 0;                // skipped steps in a row that named it
  };
  std::vector<PrecisionChange> move(std::int64_t step, const std::string& path, bool up, const std::string& reason);
  nn::Module& model_;
  AdaptiveOptions options_;
  PrecisionPlan& plan_;
  std::map<std::string, Layer> layers_;
  std::int64_t decisions_ = 0;
  std::map<LayerPrecision, double> macs_;  // run totals
};

}  // namespace mantissa::train
