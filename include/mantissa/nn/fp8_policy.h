// Which layers of a model run their products in FP8: a policy like autocast's, printable and overridable
// per module. By default every linear layer does except the model's first and last (Megatron's
// --first-last-layers-bf16: the layers nearest the data and the loss are the most sensitive); the
// embedding, attention's inner products and a tied head are not linear layers and stay in bf16.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/nn/module.h"
#include "mantissa/ops/fp8.h"

namespace mantissa::nn {

struct Fp8Policy {
  bool first_last_bf16 = true;           // the first and last linear layers (in module order) stay in bf16
  std::vector<std::string> bf16_layers;  // module paths, or path prefixes ("blocks.0"), kept in bf16
  std::vector<std::string> fp8_layers;   // module paths, or prefixes, run in FP8 whatever else says
};

struct Fp8LayerChoice {
  std::string path;  // of the linear layer
  bool fp8;
  std::string reason;  // "default", "first layer", "last layer", "--fp8-bf16-layers", ...
};

// Enables FP8 in the model's linear layers as the policy says; returns each linear layer's choice, in
// module order. Throws std::invalid_argument for a path in the policy that names no module.
std::vector<Fp8LayerChoice> apply_fp8_policy(Module& model, const Fp8Options& options, const Fp8Policy& policy);
// "fp8 in 14 of 16 linear layers; bf16: blocks.0.attn.qkv (first layer), ..." and one line per layer if asked.
std::string fp8_plan_str(const std::vector<Fp8LayerChoice>& plan, bool every_layer = false);

// After each optimizer step: the delayed recipe's histories and scales in every FP8 layer. Returns how
// many scales changed.
std::int64_t fp8_end_step(Module& model);
// Data parallel: every FP8 layer's amaxes of this step, three a layer in order (-1 where an operand was
// not seen), to be reduced across ranks with max before fp8_end_step(), as Transformer Engine reduces
// them, so that every rank keeps the same histories and scales; and setting them back.
std::vector<double> fp8_step_amaxes(Module& model);
void set_fp8_step_amaxes(Module& model, std::span<const double> amaxes);
// Each FP8 layer's quantization counts since the last reset (by module path, in module order), and the
// reset: what telemetry reports per layer.
std::vector<std::pair<std::string, Fp8Counters>> fp8_layer_counters(Module& model);
void reset_fp8_layer_counters(Module& model);
// Every FP8 layer's state checked (after a checkpoint was loaded); throws std::invalid_argument naming
// the layer.
void validate_fp8_state(Module& model);

}  // namespace mantissa::nn
